"""Judge variance (issue 45): `[[judges]] repeats = k` judges each response k times, and the summary
and report split each cell's variance into between-case, between-epoch and between-repeat parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atelier.benchmarks.metrics.variance import variance_components
from atelier.runs.execution.preflight import repeat_problems
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from tests.test_cli_errors import atelier

QUICKSTART = "runs/recipes/quickstart.toml"


def test_variance_components_by_hand() -> None:
    # two cases x two epochs x two repeats; repeats differ by 0.2 (variance 0.02), epoch means by
    # 0.4 within a case, cases by 1.0
    scores = {
        "a": {1: [0.1, 0.3], 2: [0.5, 0.7]},
        "b": {1: [1.1, 1.3], 2: [1.5, 1.7]},
    }
    v = variance_components(scores)
    assert v.between_repeat == pytest.approx(0.02)
    assert v.between_epoch == pytest.approx(0.08 - 0.02 / 2)  # epoch means 0.2, 0.6: variance 0.08
    assert v.between_case == pytest.approx(0.5 - v.between_epoch / 2 - 0.02 / 4)  # case means 0.4, 1.4
    assert v.n_cases == 2 and v.epochs == 2 and v.repeats == 2
    assert sum(v.shares.values()) == pytest.approx(1.0)


def test_a_level_that_was_not_repeated_is_not_measured_rather_than_zero() -> None:
    v = variance_components({"a": {1: [0.2]}, "b": {1: [0.8]}, "c": {1: [0.5]}})
    assert v.between_epoch is None and v.between_repeat is None and v.shares["between_repeat"] is None
    assert v.between_case == pytest.approx(0.09)
    identical = variance_components({"a": {1: [0.4, 0.4, 0.4]}, "b": {1: [0.6, 0.6, 0.6]}})
    assert identical.between_repeat == pytest.approx(0.0, abs=1e-12)  # measured, and nothing moved


def _quickstart_with_repeats(tmp_path: Path, repeats: int, judge_model: str | None = None) -> Path:
    text = Path(QUICKSTART).read_text()
    text = text.replace('name = "lampqa_aspects"', f'name = "lampqa_aspects"\nrepeats = {repeats}')
    if judge_model is not None:
        text = text.replace('[models.judge]\nmodel = "scripted"', f'[models.judge]\nmodel = "{judge_model}"')
    path = tmp_path / "repeats.toml"
    path.write_text(text)
    return path


def test_repeats_3_on_the_quickstart_put_the_judge_variance_in_summary_and_report(
    tmp_path, capsys, monkeypatch, cache_dir
) -> None:
    recipe = _quickstart_with_repeats(tmp_path, 3)
    out = tmp_path / "run"
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--limit", "4", "--out", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    for system in ("direct-none", "direct-full"):
        variance = summary["systems"][system]["judges"]["lampqa_aspects"]["variance"]
        assert variance["repeats"] == 3 and variance["n_cases"] == 4
        assert variance["between_repeat"] is not None and variance["between_epoch"] is None
    # each repeat was its own request (its own seed, so its own cache key): three judge calls per episode
    calls = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    judged = [c for c in calls if c["role"] == "lampqa_judge"]  # one call per rubric aspect, per repeat
    per_episode: dict[tuple[str, str], list[str]] = {}
    for c in judged:
        per_episode.setdefault((c["case_id"], c["system"]), []).append(c["request_key"])
    assert len(per_episode) == 8
    assert all(len(keys) % 3 == 0 and len(set(keys)) == len(keys) for keys in per_episode.values())
    html = (out / "report.html").read_text()
    assert 'id="variance-components"' in html and "between judge repeats" in html
    assert f"{variance['between_repeat']:.3f}"[:4] in html


@pytest.mark.parametrize(
    ("judge", "refused"),
    [
        ({"model": "openai/gpt-4o-mini"}, True),  # a real model at temperature 0: one judgment three times
        ({"model": "openai/gpt-4o-mini", "temperature": 0.7}, False),
        ({"model": "scripted"}, False),  # the scripted model follows the seed at any temperature
    ],
)
def test_preflight_says_repeats_of_a_real_judge_at_temperature_0_would_be_identical(judge, refused) -> None:
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["models"] = {"system": {"model": "scripted"}, "judge": judge}
    data["judges"] = [{"name": "lampqa_aspects", "repeats": 3}]
    problems = repeat_problems(parse_recipe(data))
    if refused:
        assert problems == [
            "judges[0] (lampqa_aspects): repeats = 3, but its role lampqa_judge (openai/gpt-4o-mini, models.judge) "
            "answers at temperature 0, so the 3 repeats would be identical and the judge's own variance would "
            "read 0: set [models.judge] temperature > 0 (e.g. 0.7), or repeats = 1"
        ]
    else:
        assert problems == []
    data["judges"] = [{"name": "lampqa_aspects"}]  # one judgment: nothing to repeat
    assert repeat_problems(parse_recipe(data)) == []


def test_a_run_with_repeats_on_a_real_model_at_temperature_0_stops_at_preflight(
    tmp_path, capsys, monkeypatch, cache_dir
) -> None:
    recipe = _quickstart_with_repeats(tmp_path, 3)
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        str(recipe),
        "--model",
        "openai/gpt-4o-mini",
        "--api-base",
        "http://127.0.0.1:9/v1",
        "--limit",
        "1",
        "--out",
        str(tmp_path / "r"),
    )
    assert code == 2 and "Traceback" not in err
    assert "repeats = 3, but its role lampqa_judge (openai/gpt-4o-mini, models.judge) answers at temperature 0" in err
    assert not (tmp_path / "r" / "results.jsonl").exists()
