"""`atelier plan RUN --detect D` (issue 45; issue 50, item 1): the cases x epochs x judge repeats a
comparison needs for the run's own test to declare D with 80% power — simulated from the pilot's
variance by source, never a design whose test cannot reject — and what the plan costs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from atelier.benchmarks.metrics.calibration import measured_power, pdr_design
from atelier.benchmarks.metrics.clusters import ClusterDesign, z_sum
from atelier.benchmarks.metrics.power import Components, smallest_design
from atelier.benchmarks.metrics.variance import PlanVariance, detectable, planned_variance, required_cases
from tests.test_cli_errors import atelier, the_error

QUICKSTART = Path("runs/recipes/quickstart.toml")


def test_independent_cases_need_the_textbook_n() -> None:
    v = PlanVariance(case=0.04, epoch=0.0, repeat=0.0)
    n = required_cases(v, detect=0.05, epochs=1, repeats=1, max_cases=10_000)
    assert n == math.ceil((z_sum() * 0.2 / 0.05) ** 2)  # (2.80 x sd / D)^2 = 125.6 -> 126
    assert detectable(v, n, 1, 1) <= 0.05 < detectable(v, n - 1, 1, 1)


def test_repeats_shrink_only_the_judges_part_and_clusters_are_capped_by_the_benchmark() -> None:
    v = PlanVariance(
        clusters={"persona": 0.02},
        cases_per_cluster={"persona": 10},
        max_clusters={"persona": 25},
        case=0.01,
        epoch=0.01,
        repeat=0.08,
    )
    assert planned_variance(v, 100, 1, 1) == pytest.approx(0.02 / 10 + 0.01 / 100 + 0.01 / 100 + 0.08 / 100)
    assert planned_variance(v, 100, 1, 4) < planned_variance(v, 100, 1, 1)
    # past 250 cases there are no more personas: the persona part stops shrinking
    assert planned_variance(v, 1000, 1, 1) - (0.01 + 0.01 + 0.08) / 1000 == pytest.approx(0.02 / 25)
    floor = z_sum() * math.sqrt(0.02 / 25)
    assert required_cases(v, detect=floor * 0.99, epochs=5, repeats=5, max_cases=250) is None


def _clusters_of(per: int):
    return lambda n: ClusterDesign.of([f"c{i // per}" for i in range(n)], n)


def test_the_promised_power_is_the_power_the_runs_test_has_on_fresh_data() -> None:
    """One-way clusters of 5 cases and PDR's crossed layout: the design the search picks is promised
    >= 80%, and fresh datasets of it, tested one at a time, are declared about that often (the full
    figures, at 5, 8, 10 and 25 clusters: docs/statistics.md, `calibration.plan_rows`)."""
    one_way = Components({"cluster": 0.3}, 0.7)
    for sizes, design_for, components, difference in (
        (list(range(2, 201)), _clusters_of(5), one_way, 0.674),  # about 10 clusters
        (list(range(10, 251)), pdr_design, Components({"persona": 0.15, "task": 0.1}, 0.5), 0.42),
    ):
        picked, _ = smallest_design(sizes, design_for, components, difference, datasets=600)
        assert picked is not None and 0.8 <= picked.power < 0.9
        measured, _ = measured_power(design_for(picked.cases), components, difference, 500, seed=3)
        assert abs(measured - picked.power) < 0.07, (picked, measured)  # about 3.5 standard errors


def test_a_design_whose_test_cannot_reject_is_never_proposed() -> None:
    """Five clusters at most (the benchmark has no more): the sign-flip test's smallest p is 0.0625,
    so no number of cases declares any difference, and the plan says why."""
    capped = lambda n: ClusterDesign.of([f"c{i % 5}" for i in range(n)], n)
    picked, best = smallest_design(list(range(2, 101)), capped, Components({"cluster": 0.1}, 0.1), 5.0, datasets=200)
    assert picked is None and best.power == 0.0 and best.detectable is None
    assert "with 5 clusters the smallest p the sign-flip test can give is 0.0625" in best.method
    six = lambda n: ClusterDesign.of([f"c{i % 6}" for i in range(n)], n)
    picked, _ = smallest_design(list(range(12, 101)), six, Components({"cluster": 0.01}, 0.1), 2.0, datasets=200)
    assert picked is not None and picked.clusters == {"cluster": 6}  # six can: its smallest p is 0.031


def _pilot(tmp_path: Path, capsys, monkeypatch) -> Path:
    recipe = tmp_path / "pilot.toml"
    recipe.write_text(QUICKSTART.read_text().replace('name = "lampqa_aspects"', 'name = "lampqa_aspects"\nrepeats = 3'))
    out = tmp_path / "pilot"
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--limit", "12", "--epochs", "2", "--out", str(out))
    assert code == 0, err
    return out


def test_plan_reads_a_pilot_and_prices_each_option(tmp_path, capsys, monkeypatch, cache_dir) -> None:
    pilot = _pilot(tmp_path, capsys, monkeypatch)
    code, out, err = atelier(capsys, monkeypatch, "plan", str(pilot), "--detect", "0.1", "--json")
    assert code == 0, err
    plan = json.loads(out)
    [comparison] = plan["comparisons"]
    assert (comparison["judge"], comparison["a"], comparison["b"]) == ("lampqa_aspects", "direct-none", "direct-full")
    assert comparison["pilot"]["cases"] == 12 and comparison["pilot"]["repeats"] == 3
    assert comparison["variance"]["repeat"] > 0  # measured: the pilot judged each response three times
    assert "user" in comparison["variance"]["clusters"]
    feasible = [o for o in comparison["options"] if o["cases"] is not None]
    assert feasible and comparison["recommended"] == feasible[0]
    for option in feasible:
        assert option["mde"] <= 0.1 and option["power"] >= 0.8 and option["power_error"] > 0
        assert "analysed with the run's test (sign-flip test over clusters: user" in option["power_method"]
        assert option["clusters"]["user"] >= 6 and option["smallest_p"] < 0.05
        assert option["episodes"] == option["cases"] * option["epochs"] * 2
        assert option["cost"]["calls"][0] > 0 and option["cost"]["usd"] == [0.0, 0.0]  # scripted: free
    # the same cases with more judge repeats cost more calls
    by_plan = {(o["epochs"], o["repeats"]): o for o in feasible}
    per_case = {k: o["cost"]["calls"][1] / (o["cases"] * o["epochs"]) for k, o in by_plan.items()}
    if (1, 3) in per_case and (1, 5) in per_case:
        assert per_case[(1, 5)] > per_case[(1, 3)]
    # a difference no plan on this 21-case suite can detect is said, with the best MDE there is
    code, out, err = atelier(capsys, monkeypatch, "plan", str(pilot), "--detect", "0.001", "--no-cost", "--json")
    assert code == 0, err
    [impossible] = json.loads(out)["comparisons"]
    assert impossible["recommended"] is None
    assert any(note.startswith("not detectable on this benchmark: all 21 cases") for note in impossible["notes"])


def test_plan_refuses_what_it_cannot_plan_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    code, _, err = atelier(capsys, monkeypatch, "plan", str(tmp_path), "--detect", "0.3")
    assert code == 2 and "is not a run folder" in the_error(err)
    code, _, err = atelier(capsys, monkeypatch, "plan", str(tmp_path), "--detect", "-1")
    assert code == 2 and "Traceback" not in err
