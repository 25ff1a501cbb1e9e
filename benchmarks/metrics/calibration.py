"""What the intervals, tests and plans a run prints deliver, measured by simulation.

`python -m atelier.benchmarks.metrics.calibration` prints the tables docs/statistics.md quotes
(between its `calibration:begin` / `calibration:end` marks; `--write FILE` puts them there). Every
figure comes from data simulated here, analysed with the procedures a run applies
(`procedures.DifferenceProcedure`, `procedures.MeanProcedure`; the power checks one dataset at a
time, as a run does), and seeded: the same command prints the same tables.

- `coverage_rows`: per scenario and number of clusters, how often the interval of a mean difference
  holds the true difference (and so, the interval being the test's inversion, how often the test
  rejects a true null: 1 - coverage), and how often the interval of a mean holds the true mean;
  the percentile cluster bootstrap (what runs printed before) beside them.
- `crossed_rows`: the same for PDR-Bench's persona x task layout (the multiway t), whole and subsets.
- `mde_rows`: the power the test actually has at the `mde` a paired test reports.
- `plan_rows`: what `atelier plan`'s search promises (power at the design it picks) against the
  power measured on fresh data of that design, at 5, 8, 10 and 25 clusters and the PDR layout.
- `few_clusters_threshold`: the fewest clusters from which every typical scenario's coverage is at
  least 93%; `clusters.MIN_CLUSTERS` (the few-clusters warning) must equal it.

Nothing runs at import.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.metrics.clusters import ClusterDesign
from atelier.benchmarks.metrics.power import Components, PowerCurve, smallest_design
from atelier.benchmarks.metrics.procedures import DifferenceProcedure, MeanProcedure
from atelier.benchmarks.metrics.statistics import difference_test

GRID = (5, 6, 8, 10, 15, 25, 50)
MEAN_FACTOR = 5  # a mean's interval is cheap: five times the datasets, for coverage within 0.3 points
WARNING_COVERAGE = 0.93
BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"


@dataclass(frozen=True)
class Scenario:
    """Datasets of per-case values over `clusters` clusters: (rows, cluster codes, true mean)."""

    name: str
    kind: str  # "difference" (of two systems) or "mean" (one system's score)
    typical: bool  # counted for the few-clusters threshold (the extreme skews are shown, not counted)
    make: Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray, float]]


def _balanced(clusters: int, per: int = 10) -> np.ndarray:
    return np.repeat(np.arange(clusters), per)


def _normal(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    codes = _balanced(g)
    return rng.normal(0, 0.55, (d, g))[:, codes] + rng.normal(0, 0.84, (d, codes.size)), codes, 0.0


def _unequal(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    sizes = np.maximum(1, np.round(rng.lognormal(math.log(8), 0.9, g))).astype(int)
    codes = np.repeat(np.arange(g), sizes)
    spread = (0.5 + rng.random(g))[codes]  # clusters differ in their noise, too
    return rng.normal(0, 0.55, (d, g))[:, codes] + rng.normal(0, 1, (d, codes.size)) * spread, codes, 0.0


def _heavy(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    codes = _balanced(g)
    effects = stats.t.rvs(3, size=(d, g), random_state=rng) * 0.5
    return effects[:, codes] + stats.t.rvs(3, size=(d, codes.size), random_state=rng), codes, 0.0


def _judge_scale(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """Two systems' scores on a 0 / 0.5 / 1 scale, of the same quality, which varies by cluster."""
    codes = _balanced(g)
    quality = rng.normal(0, 1, (d, g))[:, codes]

    def score() -> np.ndarray:
        z = quality + rng.normal(0, 1, (d, codes.size))
        return np.where(z < -0.5, 0.0, np.where(z < 0.8, 0.5, 1.0))

    return score() - score(), codes, 0.0


def _accuracy_difference(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """Two systems right or wrong (0/1) with the same chance, which varies by cluster."""
    codes = _balanced(g)
    chance = 1 / (1 + np.exp(-(1.0 + rng.normal(0, 1, (d, g))[:, codes])))
    right = lambda: (rng.random((d, codes.size)) < chance).astype(float)  # noqa: E731
    return right() - right(), codes, 0.0


def _skewed_difference(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """Cluster effects and case noise both exponential (mean 0): a strongly skewed difference."""
    codes = _balanced(g)
    return rng.exponential(1, (d, g))[:, codes] - 1 + rng.exponential(1, (d, codes.size)) - 1, codes, 0.0


def _population_mean(draw: Callable[[np.random.Generator, int], np.ndarray]) -> float:
    return float(draw(np.random.default_rng(12345), 2_000_000).mean())


def _bounded_draw(centre: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    def draw(rng: np.random.Generator, size: int) -> np.ndarray:
        return 1 / (1 + np.exp(-(centre + rng.normal(0, 0.8, size) + rng.normal(0, 1, size))))

    return draw


def _bounded(centre: float) -> Callable[[int, int, np.random.Generator], tuple[np.ndarray, np.ndarray, float]]:
    truth = _population_mean(_bounded_draw(centre))

    def make(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
        codes = _balanced(g)
        z = centre + rng.normal(0, 0.8, (d, g))[:, codes] + rng.normal(0, 1, (d, codes.size))
        return 1 / (1 + np.exp(-z)), codes, truth

    return make


def _accuracy(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    codes = _balanced(g)
    chance = 1 / (1 + np.exp(-(1.4 + rng.normal(0, 1, (d, g))[:, codes])))
    truth = _population_mean(lambda r, size: 1 / (1 + np.exp(-(1.4 + r.normal(0, 1, size)))))
    return (rng.random((d, codes.size)) < chance).astype(float), codes, truth


def _five_point(g: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """A 1-5 judge scale, quality varying by cluster."""

    def draw(z: np.ndarray) -> np.ndarray:
        return 1.0 + np.digitize(z, [-1.5, -0.5, 0.5, 1.5])

    codes = _balanced(g)
    truth = _population_mean(lambda r, size: draw(0.3 + r.normal(0, 0.7, size) + r.normal(0, 1, size)))
    return draw(0.3 + rng.normal(0, 0.7, (d, g))[:, codes] + rng.normal(0, 1, (d, codes.size))), codes, truth


SCENARIOS = (
    Scenario("normal", "difference", True, _normal),
    Scenario("unequal clusters", "difference", True, _unequal),
    Scenario("heavy tails (t3)", "difference", True, _heavy),
    Scenario("0/0.5/1 judge scale", "difference", True, _judge_scale),
    Scenario("0/1 accuracy", "difference", True, _accuracy_difference),
    Scenario("exponential skew", "difference", False, _skewed_difference),
    Scenario("0-1 score, mean 0.8", "mean", True, _bounded(1.5)),
    Scenario("0/1 accuracy", "mean", True, _accuracy),
    Scenario("1-5 judge scale", "mean", True, _five_point),
    Scenario("0-1 score near ceiling", "mean", False, _bounded(2.8)),
)


def _percentile_bootstrap(rows: np.ndarray, codes: np.ndarray, rng: np.random.Generator, resamples: int = 1000):
    """The percentile cluster bootstrap of the mean (what runs printed before): (low, high) per row."""
    g = int(codes.max()) + 1
    sizes = np.bincount(codes).astype(float)
    picks = rng.integers(0, g, size=(resamples, g))
    counts = np.zeros((resamples, g))
    np.add.at(counts, (np.repeat(np.arange(resamples), g), picks.ravel()), 1.0)
    sums = np.stack([np.bincount(codes, weights=row, minlength=g) for row in rows])
    means = (sums @ counts.T) / (counts @ sizes)
    return np.quantile(means, 0.025, axis=1), np.quantile(means, 0.975, axis=1)


def coverage_rows(datasets: int = 2000, grid: tuple[int, ...] = GRID, seed: int = 0) -> list[dict[str, Any]]:
    """Per scenario and clusters: coverage of the run's interval and of the
    percentile cluster bootstrap, and for a difference the share of datasets with p < 0.05."""
    rows = []
    for number, scenario in enumerate(SCENARIOS):
        for g in grid:
            rng = np.random.default_rng([seed, number, g])
            count = datasets if scenario.kind == "difference" else datasets * MEAN_FACTOR
            data, codes, truth = scenario.make(g, count, rng)
            design = ClusterDesign.of(codes.tolist(), codes.size)
            rejected = 0
            if scenario.kind == "difference":
                analysis = DifferenceProcedure(design).analyse(data)
                rejected = int(np.count_nonzero(analysis.p < 0.05))
            else:
                analysis = MeanProcedure(design).analyse(data)
            covered = int(np.count_nonzero((analysis.low <= truth) & (truth <= analysis.high)))
            low, high = _percentile_bootstrap(data, codes, rng)
            rows.append(
                {
                    "scenario": scenario.name,
                    "kind": scenario.kind,
                    "typical": scenario.typical,
                    "clusters": g,
                    "datasets": count,
                    "coverage": covered / count,
                    "rejects": rejected / count if scenario.kind == "difference" else None,
                    "bootstrap": float(np.mean((low <= truth) & (truth <= high))),
                    "testable": DifferenceProcedure(design).testable,
                }
            )
    return rows


def few_clusters_threshold(rows: list[dict[str, Any]], level: float = WARNING_COVERAGE) -> int:
    """The fewest clusters of the grid from which every typical scenario's coverage is at least
    `level` (untestable designs, whose interval is unbounded, aside)."""
    grid = sorted({int(r["clusters"]) for r in rows})
    short = {int(r["clusters"]) for r in rows if r["typical"] and r["testable"] and float(r["coverage"]) < level}
    return next((g for g in grid if not any(s >= g for s in short)), grid[-1] + 1)


# ---------------------------------------------------------------------- PDR's persona x task layout


def pdr_layout() -> tuple[np.ndarray, np.ndarray]:
    """PDR-Bench's shape: 25 personas x 50 tasks, 250 cases, each persona 10 tasks, each task 5 personas."""
    pairs = [(p, (2 * p + 5 * j) % 50) for p in range(25) for j in range(10)]
    return np.array([p for p, _ in pairs]), np.array([t for _, t in pairs])


def pdr_design(cases: int, seed: int = 0) -> ClusterDesign:
    """The design of `cases` of the layout drawn as a run's `--limit` draws them (seeded, in order)."""
    personas, tasks = pdr_layout()
    chosen = sorted(random.Random(f"pdr:{seed}").sample(range(personas.size), cases))
    return ClusterDesign.of(
        {"persona": [f"p{p}" for p in personas[chosen]], "task": [f"t{t}" for t in tasks[chosen]]}, cases
    )


PDR_COMPONENTS = Components(clusters={"persona": 0.15, "task": 0.1}, residual=0.5)


def crossed_rows(datasets: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    for cases in (250, 100, 60, 30):
        design = pdr_design(cases)
        rng = np.random.default_rng([seed, cases])
        data = rng.normal(0, math.sqrt(PDR_COMPONENTS.residual), (datasets, cases))
        for name, codes in zip(design.names, design.codes):
            effects = rng.normal(0, math.sqrt(PDR_COMPONENTS.clusters[name]), (datasets, int(codes.max()) + 1))
            data += effects[:, codes]
        analysis = DifferenceProcedure(design).analyse(data)
        covered = int(np.count_nonzero((analysis.low <= 0) & (0 <= analysis.high)))
        rows.append({"cases": cases, "clusters": design.levels, "coverage": covered / datasets})
    return rows


# ---------------------------------------------------------------------- power: the mde and the plan


def measured_power(
    design: ClusterDesign, components: Components, difference: float, datasets: int, seed: int
) -> tuple[float, float]:
    """The share of datasets (true difference `difference`) whose test, run one at a time, gives p < 0.05."""
    rng = np.random.default_rng(seed)
    procedure = DifferenceProcedure(design)
    declared = 0
    for _ in range(datasets):
        row = difference + rng.normal(0, math.sqrt(components.residual), design.n)
        for name, codes in zip(design.names, design.codes):
            row += rng.normal(0, math.sqrt(components.clusters.get(name, 0.0)), int(codes.max()) + 1)[codes]
        declared += bool(procedure.analyse(row).p[0] < 0.05)
    share = declared / datasets
    return share, math.sqrt(share * (1 - share) / datasets)


def mde_rows(datasets: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """For datasets of 8, 10, 25 clusters of 10 cases: the mde a paired test reports on one observed
    dataset, and the power the test has there (measured on fresh datasets with that true difference
    and the true variance): a reported mde rests on estimated variance, so it varies with the data."""
    truth = Components(clusters={"cluster": 0.3}, residual=0.7)
    rows = []
    for g in (8, 10, 25):
        codes = _balanced(g)
        design = ClusterDesign.of(codes.tolist(), codes.size)
        exact = PowerCurve.simulate(DifferenceProcedure(design), truth, 10_000, seed).detectable(0.8)
        observed: list[float] = []
        for k in range(5):
            rng = np.random.default_rng([seed, g, k])
            sample = rng.normal(0, math.sqrt(0.3), g)[codes] + rng.normal(0, math.sqrt(0.7), codes.size)
            mde = difference_test(sample, clusters=codes.tolist()).mde
            if mde is not None:
                observed.append(mde)
        assert exact is not None
        power, error = measured_power(design, truth, exact, datasets, seed + g)
        rows.append(
            {
                "clusters": g,
                "mde_true_variance": exact,
                "power_there": power,
                "error": error,
                "reported_range": (min(observed), max(observed)),
            }
        )
    return rows


def plan_rows(datasets: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """`atelier plan`'s search (`power.smallest_design`) for a difference chosen so that the design it
    picks has about 5, 8, 10 and 25 clusters of 5 cases (the benchmark has 5 clusters in the first,
    40 in the others) and on PDR's layout; its promised power against the power measured on fresh
    datasets of that design, analysed one at a time."""
    one_way = Components(clusters={"cluster": 0.3}, residual=0.7)
    rows = []
    for target, available in ((5, 5), (8, 40), (10, 40), (25, 40)):
        per = 5

        def design_for(n: int, per: int = per) -> ClusterDesign:
            labels = [f"c{i // per}" for i in range(n)]
            return ClusterDesign.of(labels, n)

        sizes = list(range(2, available * per + 1))
        reference = DifferenceProcedure(design_for(target * per))
        curve = PowerCurve.simulate(reference, one_way, datasets, seed + 1)
        # 80% power at about `target` clusters (none at 5: any difference, then)
        difference = curve.detectable(0.8) or 1.0
        picked, best = smallest_design(sizes, design_for, one_way, difference, seed=seed, datasets=datasets)
        row: dict[str, Any] = {
            "layout": f"one-way, {available} clusters of {per}",
            "difference": difference if reference.testable else None,
        }
        if picked is None:
            row.update(picked=None, why=best.method)
        else:
            measured, error = measured_power(design_for(picked.cases), one_way, difference, datasets, seed + 7)
            row.update(picked=picked, measured=measured, error=error)
        rows.append(row)
    crossed = PowerCurve.simulate(DifferenceProcedure(pdr_design(60)), PDR_COMPONENTS, datasets, seed + 1)
    difference = crossed.detectable(0.8) or 1.0
    picked, best = smallest_design(list(range(10, 251)), pdr_design, PDR_COMPONENTS, difference, datasets=datasets)
    row = {"layout": "PDR persona x task (25 x 50)", "difference": difference, "picked": picked}
    if picked is not None:
        measured, error = measured_power(pdr_design(picked.cases), PDR_COMPONENTS, difference, datasets, seed + 7)
        row.update(measured=measured, error=error)
    rows.append(row)
    return rows


# ---------------------------------------------------------------------- the tables


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}%"


def tables(datasets: int = 4000, seed: int = 0) -> str:
    coverage = coverage_rows(datasets, seed=seed)
    lines = [
        f"Coverage of 95% intervals over {datasets:,} simulated datasets per cell ({datasets * MEAN_FACTOR:,} for "
        "a mean), clusters of 10 cases (unequal: 1-60), analysed with the run's procedures; the percentile "
        "cluster bootstrap (what runs printed before) on the same datasets.",
        "",
        "| interval of | scenario | " + " | ".join(f"G={g}" for g in GRID) + " |",
        "|---|---|" + "---|" * len(GRID),
    ]
    for scenario in SCENARIOS:
        mine = [r for r in coverage if r["scenario"] == scenario.name and r["kind"] == scenario.kind]
        label = "a difference" if scenario.kind == "difference" else "a mean"
        name = scenario.name + ("" if scenario.typical else " (not typical)")
        lines.append(
            f"| {label} | {name} | "
            + " | ".join(
                "unbounded" if not r["testable"] and r["kind"] == "difference" else _pct(r["coverage"]) for r in mine
            )
            + " |"
        )
        lines.append("| | percentile cluster bootstrap | " + " | ".join(_pct(r["bootstrap"]) for r in mine) + " |")
    threshold = few_clusters_threshold(coverage)
    lines += [
        "",
        f"The test of a difference rejects a true null in 1 − coverage of the datasets (the interval is its "
        f"inversion). Every typical scenario's coverage is at least {WARNING_COVERAGE:.0%} from "
        f"**{threshold} clusters** on: below that the few-clusters warning is shown (`clusters.MIN_CLUSTERS`).",
        "",
        "PDR-Bench's persona × task layout (multiway t; persona variance 0.15, task 0.1, case 0.5), a "
        "difference's interval:",
        "",
        "| cases (seeded subset) | personas × tasks | coverage |",
        "|---|---|---|",
    ]
    for row in crossed_rows(datasets, seed):
        levels = row["clusters"]
        assert isinstance(levels, dict)
        lines.append(f"| {row['cases']} | {levels.get('persona')} × {levels.get('task')} | {_pct(row['coverage'])} |")
    lines += [
        "",
        "Power at the mde a paired test reports (one-way, between-cluster variance 0.3, case 0.7): the mde "
        "computed with the true variance, the power measured there on fresh datasets, and the range of mde "
        "reported on five observed datasets (estimated variance):",
        "",
        "| clusters | mde (true variance) | power there | reported mde on 5 datasets |",
        "|---|---|---|---|",
    ]
    for row in mde_rows(max(500, datasets // 2), seed):
        low, high = row["reported_range"]
        lines.append(
            f"| {row['clusters']} | {row['mde_true_variance']:.3f} | {_pct(row['power_there'])} ± "
            f"{_pct(row['error'])} | {low:.3f}–{high:.3f} |"
        )
    lines += [
        "",
        "`atelier plan`'s promise against fresh data (the difference set so the design it picks has about "
        "the clusters named; promised = its simulation, measured = fresh datasets of the picked design "
        "analysed one at a time):",
        "",
        "| layout | difference | picked | promised | measured |",
        "|---|---|---|---|---|",
    ]
    for row in plan_rows(datasets, seed):
        picked = row["picked"]
        if picked is None:
            shown = "any" if row["difference"] is None else f"{float(row['difference']):.3f}"
            lines.append(f"| {row['layout']} | {shown} | none | – | {row.get('why')} |")
            continue
        clusters = " × ".join(str(v) for v in picked.clusters.values())
        lines.append(
            f"| {row['layout']} | {float(row['difference']):.3f} | {picked.cases} cases ({clusters} clusters) | "
            f"{_pct(picked.power)} ± {_pct(picked.error)} | {_pct(row['measured'])} ± {_pct(row['error'])} |"
        )
    return "\n".join(lines) + "\n"


def write_into(path: Path, text: str) -> None:
    """Replace what stands between the calibration marks of `path` with `text`."""
    document = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(document):
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to write into")
    write_atomically(path, pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", document), redact=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Simulate the run's intervals, tests and plans; print the tables.")
    parser.add_argument("--datasets", type=int, default=4000, help="Simulated datasets per cell.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", type=Path, default=None, help="Write the tables into this file's calibration block.")
    args = parser.parse_args(argv)
    text = tables(args.datasets, args.seed)
    if args.write is not None:
        write_into(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
