"""`atelier plan RUN_DIR --detect D`: from a pilot run, the cases x epochs x judge repeats each
comparison needs so that the test the run applies declares a true difference of D (in the judge's
own scale) with 80% power at 5% two-sided, and what that costs.

Per judge and pair of systems (a - b, as summary.json's comparisons), the pilot gives the variance
of the paired difference by source (`benchmarks.metrics.variance`):
- between clusters, per dimension the cases carry (PDR: persona and task), from one-way
  cluster-robust variances of the per-case differences (`cluster_components`);
- between the remaining cases;
- between epochs of one case and between judge repeats of one response, each the sum of the two
  systems' (`variance_components`): measured only when the pilot ran epochs > 1 / repeats > 1;
  otherwise taken as 0 and said in the plan's notes (more epochs or repeats then buy nothing).

A plan of n cases, e epochs and r repeats is the design the run would have: the cases `--limit n`
draws (the same loader, seed and cluster labels), each case's difference a normal random-effects
draw with those components (its residual case + epoch / e + repeat / (e r); with judgments reused
across epochs, `[run] reuse_judgments`, repeat / r: the same judgment does not average). Its power
is simulated (`benchmarks.metrics.power`): `PLAN_DATASETS` datasets of that design, each analysed
with the exact test the run applies (the sign-flip test over its clusters or cases with the run's
seed and resamples, the multiway t on a crossed design), the share that declares D, with its
Monte Carlo error. For each (e, r) the fewest cases reaching the power are found by a search that
starts where the normal-theory formula puts them (`variance.required_cases`). A design whose test
cannot reach the level at all (a sign-flip test over 5 clusters: its smallest p is 0.0625) is
never proposed; the plan says why.

Cost: the recipe's cost forecast (`runs.execution.cost.forecast`, a scripted dry run, no provider
call) of the pilot's cases with one and with two judge repeats gives each system's calls and dollars
per case for its episode and per judge repeat; a plan costs n x e x (episode + r x repeat) for
both systems, as a low-high range (null dollars: a price is unknown). `--model` prices it on another
model.

A pilot with counterfactual controls (`[run] controls`) also plans each personalization effect,
`system - system~kind` (runs/studies/plan_controls.py), and says what each control adds per case.
"""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.metrics.clusters import ClusterDesign
from atelier.benchmarks.metrics.power import Components, DesignPower, design_power, smallest_design
from atelier.benchmarks.metrics.procedures import DifferenceProcedure
from atelier.benchmarks.metrics.statistics import DEFAULT_RESAMPLES
from atelier.benchmarks.metrics.variance import PlanVariance, cluster_components, required_cases, variance_components
from atelier.runs.folder.epochs import run_epochs
from atelier.runs.folder.layout import RunFolder, expected_keys, load_run_config
from atelier.runs.folder.recipe import Recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile
from atelier.runs.reading.comparisons import cluster_labels, scores_by_case
from atelier.runs.reading.summary import repeat_scores
from atelier.runs.studies.plan_controls import control_cost_notes, control_pairs, control_records

EPOCH_OPTIONS = (1, 2, 3, 5)
REPEAT_OPTIONS = (1, 2, 3, 5)
PLAN_DATASETS = 1_000  # simulated datasets per design probed (Monte Carlo error about 1.3 points at 80%)


class CostRange(BaseModel):
    calls: list[float] = Field(description="[low, high] model calls.")
    usd: list[float] | None = Field(description="[low, high] dollars; null when a price is unknown.")


class PlanOption(BaseModel):
    epochs: int
    repeats: int
    cases: int | None = Field(description="Fewest cases that detect the difference; null: not even every case does.")
    clusters: dict[str, int] = Field(
        default_factory=dict, description="Clusters per dimension of those cases (else of every case)."
    )
    power: float = Field(description="The power the run's test has at `cases` (else at every case) to declare it.")
    power_error: float = Field(description="Its Monte Carlo standard error (0: computed, not simulated).")
    power_method: str = Field(description="How the power was found (a simulation of the run's test, or why none).")
    smallest_p: float = Field(description="The smallest p the run's test can give with that design (0: a t test).")
    mde: float | None = Field(
        description="The smallest difference that design declares with the asked power (null: none: untestable)."
    )
    episodes: int | None = Field(default=None, description="cases x epochs x 2 systems.")
    judgments: int | None = Field(default=None, description="episodes x repeats.")
    cost: CostRange | None = None


class ComparisonPlan(BaseModel):
    judge: str
    a: str
    b: str
    pilot: dict[str, Any] = Field(description="What the pilot measured: cases, epochs, repeats, difference, its MDE.")
    variance: PlanVariance
    options: list[PlanOption] = Field(description="Per epochs x repeats, the cases needed; cheapest first.")
    recommended: PlanOption | None = Field(description="The cheapest option that detects the difference.")
    notes: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    run_dir: str
    detect: float
    power: float
    alpha: float
    benchmark_cases: int = Field(description="Cases the benchmark has (split and setting of the pilot).")
    priced_on: str | None = Field(description="The model the cost is priced on (--model), else the pilot's.")
    comparisons: list[ComparisonPlan]
    notes: list[str] = Field(default_factory=list)


def _pilot_records(run_dir: Path, config: dict[str, Any]) -> list[ResultRecord]:
    folder = RunFolder(run_dir)
    if not folder.results.is_file():
        raise ConfigError(f"{run_dir} has no results.jsonl: the pilot has not run")
    systems = [s["name"] for s in config["recipe"]["systems"]]
    wanted = set(expected_keys(config["cases"], systems, run_epochs(config)))
    return [r for key, r in ResultsFile(folder.results).load().items() if key in wanted]


def _components(
    records: list[ResultRecord],
    a: str,
    b: str,
    judge: str,
    clusters: dict[str, dict[str, str]] | None,
    reused: bool,
) -> tuple[PlanVariance, dict[str, Any], list[str], ClusterDesign]:
    """The pilot's variance of the paired difference a - b by source, what it rests on, notes, and
    the pilot's own design."""
    notes: list[str] = []
    scores_a, scores_b = scores_by_case(records, a, judge), scores_by_case(records, b, judge)
    shared = sorted(scores_a.keys() & scores_b.keys())
    if len(shared) < 2:
        raise ValueError(f"{judge}: {a} and {b} share {len(shared)} scored case(s); a plan needs 2 or more")
    differences = [scores_a[c] - scores_b[c] for c in shared]
    labels = cluster_labels(shared, clusters)
    design = ClusterDesign.of(labels, len(shared))
    notes += list(design.notes) + design.warnings()
    per_system = [variance_components(repeat_scores(records, s, judge, reused=reused)) for s in (a, b)]
    epoch = [v.between_epoch for v in per_system]
    repeat = [v.between_repeat for v in per_system]
    epochs = max(1.0, min(v.epochs for v in per_system))
    repeats = max(1.0, min(v.repeats for v in per_system))
    if any(e is None for e in epoch):
        notes.append("between-epoch variance not measured (the pilot ran one epoch): taken as 0, so epochs buy nothing")
    if any(r is None for r in repeat):
        notes.append("between-repeat variance not measured (the pilot judged once): taken as 0, so repeats buy nothing")
    if reused:
        notes.append(
            "judgments are reused across epochs ([run] reuse_judgments): more epochs do not average the judge's "
            "noise, only more judge repeats do"
        )
    epoch_var = math.fsum(e or 0.0 for e in epoch)
    repeat_var = math.fsum(r or 0.0 for r in repeat)
    between = cluster_components(differences, design)
    n = len(shared)
    spread = sum((d - sum(differences) / n) ** 2 for d in differences) / (n - 1)
    within = epoch_var / epochs + repeat_var / (repeats if reused else epochs * repeats)
    case_var = max(0.0, spread - math.fsum(between.values()) - within)
    levels = design.levels
    variance = PlanVariance(
        clusters=between,
        cases_per_cluster={name: n / g for name, g in levels.items()},
        case=case_var,
        epoch=epoch_var,
        repeat=repeat_var,
    )
    pilot = {
        "cases": n,
        "epochs": epochs,
        "repeats": repeats,
        "clusters": levels,
        "mean_difference": math.fsum(differences) / n,
    }
    return variance, pilot, notes, design


def option_components(variance: PlanVariance, epochs: float, repeats: float, reused: bool) -> Components:
    """The variance of one case's difference in a plan of `epochs` x `repeats` (module docstring)."""
    judge = variance.repeat / (repeats if reused else epochs * repeats)
    return Components(clusters=dict(variance.clusters), residual=variance.case + variance.epoch / epochs + judge)


class Designs:
    """The design of the cases `--limit n` would run (the recipe's loader, seed and cluster labels),
    for each n asked, loaded once."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._made: dict[int, ClusterDesign] = {}

    def __call__(self, n: int) -> ClusterDesign:
        if n not in self._made:
            cases = self.recipe.with_overrides(limit=n).cases()
            labels = cluster_labels([c.id for c in cases], {c.id: c.clusters for c in cases})
            self._made[n] = ClusterDesign.of(labels, len(cases))
        return self._made[n]


def _option(epochs: int, repeats: int, found: DesignPower | None, best: DesignPower) -> PlanOption:
    chosen = found or best
    return PlanOption(
        epochs=epochs,
        repeats=repeats,
        cases=found.cases if found is not None else None,
        clusters=chosen.clusters,
        power=round(chosen.power, 4),
        power_error=round(chosen.error, 4),
        power_method=chosen.method,
        smallest_p=chosen.smallest_p,
        mde=chosen.detectable,
    )


def _unit_costs(recipe: Recipe, model: str | None) -> tuple[dict[str, tuple[CostRange, CostRange]], list[str]]:
    """Per system, (one case's episode, one case's judge repeat) as calls and dollars, from the cost
    forecast of the pilot's cases with one and with two judge repeats."""
    from atelier.runs.execution.cost import forecast
    from atelier.runs.execution.runner import dry_run_ledger

    def priced(repeats: int):
        data = recipe.model_dump(mode="python")
        data["judges"] = [{**j, "repeats": repeats} for j in data["judges"]]
        data["run"]["epochs"] = 1
        data["run"]["budget_usd"] = None
        return forecast(Recipe.model_validate(data).with_overrides(model=model), run=dry_run_ledger)

    once, twice = priced(1), priced(2)
    cases = max(1, len(recipe.cases()))

    def per_case(span: Any) -> list[float] | None:
        return None if span is None else [span.low / cases, span.high / cases]

    out: dict[str, tuple[CostRange, CostRange]] = {}
    for system in once.systems:
        one, two = once.systems[system], twice.systems[system]
        calls_one, calls_two = per_case(one["calls"]), per_case(two["calls"])
        usd_one, usd_two = per_case(one["usd"]), per_case(two["usd"])
        assert calls_one is not None and calls_two is not None
        repeat_calls = [max(0.0, t - o) for o, t in zip(calls_one, calls_two)]
        repeat_usd = None if usd_one is None or usd_two is None else [max(0.0, t - o) for o, t in zip(usd_one, usd_two)]
        episode_calls = [max(0.0, o - r) for o, r in zip(calls_one, repeat_calls)]
        episode_usd = (
            None if usd_one is None or repeat_usd is None else [max(0.0, o - r) for o, r in zip(usd_one, repeat_usd)]
        )
        out[system] = (CostRange(calls=episode_calls, usd=episode_usd), CostRange(calls=repeat_calls, usd=repeat_usd))
    return out, list(once.notes)


def _plan_cost(units: list[tuple[CostRange, CostRange]], cases: int, epochs: int, repeats: int) -> CostRange:
    calls = [0.0, 0.0]
    usd: list[float] | None = [0.0, 0.0]
    for episode, repeat in units:
        for end in (0, 1):
            calls[end] += cases * epochs * (episode.calls[end] + repeats * repeat.calls[end])
        if usd is not None and episode.usd is not None and repeat.usd is not None:
            usd = [usd[end] + cases * epochs * (episode.usd[end] + repeats * repeat.usd[end]) for end in (0, 1)]
        else:
            usd = None
    return CostRange(calls=[round(c) for c in calls], usd=None if usd is None else [round(u, 6) for u in usd])


def plan_run(
    run_dir: Path,
    detect: float,
    *,
    power: float = 0.8,
    alpha: float = 0.05,
    model: str | None = None,
    with_cost: bool = True,
    datasets: int = PLAN_DATASETS,
) -> Plan:
    """The plan for every comparison of the pilot run in `run_dir` (see module docstring)."""
    if not detect > 0:
        raise ConfigError(f"--detect must be a positive difference in the judge's scale, got {detect}")
    config = load_run_config(run_dir)
    recipe = Recipe.model_validate(config["recipe"])
    records = _pilot_records(run_dir, config) + control_records(run_dir, config)  # controls as `<system>~<kind>`
    notes: list[str] = []
    try:
        everything = recipe.cases(limited=False)
    except Exception as exc:  # noqa: BLE001 - without the data, no clusters and no benchmark size
        raise ConfigError(f"{run_dir}: the pilot's cases cannot be loaded again ({exc}); a plan needs them") from None
    wanted = set(config["cases"])
    clusters = {c.id: c.clusters for c in everything if c.id in wanted}
    labels: dict[str, set[str]] = {}
    for case in everything:
        for name, label in case.clusters.items():
            labels.setdefault(name, set()).add(label)
    max_clusters = {name: len(values) for name, values in labels.items()}
    if not any(clusters.values()):
        notes.append("the cases carry no cluster keys: cases taken as independent")
    systems = [s.name for s in recipe.systems]
    judges = [str(j.get("label") or j.get("name")) for j in recipe.judges]
    reused = recipe.run.reuse_judgments
    confidence = 1 - alpha
    designs = Designs(recipe)
    sizes = list(range(2, len(everything) + 1))
    units: dict[str, tuple[CostRange, CostRange]] = {}
    if with_cost:
        units, cost_notes = _unit_costs(recipe, model)
        notes += cost_notes + control_cost_notes(units)
    if alpha != 0.05:
        notes.append(f"planned for a test at {alpha:g}; a run's own tables test at 0.05")
    plans: list[ComparisonPlan] = []
    for judge in judges:
        for a, b in [*combinations(systems, 2), *control_pairs(config)]:  # own - control: a personalization effect
            try:
                variance, pilot, comparison_notes, pilot_design = _components(records, a, b, judge, clusters, reused)
            except ValueError as exc:
                notes.append(str(exc))
                continue
            variance = variance.model_copy(
                update={"max_clusters": {k: v for k, v in max_clusters.items() if k in variance.clusters}}
            )
            here = design_power(
                DifferenceProcedure(pilot_design, confidence, DEFAULT_RESAMPLES, recipe.seed),
                option_components(variance, pilot["epochs"], pilot["repeats"], reused),
                detect,
                datasets,
                recipe.seed,
                target=power,
            )
            pilot.update(power=round(here.power, 4), mde=here.detectable)
            options = []
            for epochs in EPOCH_OPTIONS if variance.epoch > 0 else (1,):
                for repeats in REPEAT_OPTIONS if variance.repeat > 0 else (1,):
                    components = option_components(variance, epochs, repeats, reused)
                    guess = required_cases(variance, detect, epochs, repeats, len(everything), alpha, power)
                    found, best = smallest_design(
                        sizes,
                        designs,
                        components,
                        detect,
                        power=power,
                        confidence=confidence,
                        n_resamples=DEFAULT_RESAMPLES,
                        seed=recipe.seed,
                        datasets=datasets,
                        guess=guess,
                    )
                    option = _option(epochs, repeats, found, best)
                    if found is not None:
                        option.episodes = found.cases * epochs * 2
                        option.judgments = option.episodes * repeats
                        if units:
                            option.cost = _plan_cost([units[a], units[b]], found.cases, epochs, repeats)
                    options.append(option)
            feasible = [o for o in options if o.cases is not None]
            feasible.sort(key=_price)
            recommended = feasible[0] if feasible else None
            if recommended is None:
                best_option = max(options, key=lambda o: o.power)
                if best_option.smallest_p >= alpha:
                    comparison_notes.append(
                        f"not detectable on this benchmark: all {len(everything)} cases fall in "
                        f"{_clusters_text(best_option.clusters)}, and {best_option.power_method}"
                    )
                else:
                    comparison_notes.append(
                        f"not detectable on this benchmark: all {len(everything)} cases with {best_option.epochs} "
                        f"epoch(s) and {best_option.repeats} repeat(s) declare {detect:g} with "
                        f"{best_option.power:.0%} power at best"
                        + (f" (they detect {best_option.mde:.3g})" if best_option.mde is not None else "")
                        + " (epochs and repeats shrink only their own parts of the variance; the cases' and "
                        "clusters' need more cases than the benchmark has)"
                    )
            plans.append(
                ComparisonPlan(
                    judge=judge,
                    a=a,
                    b=b,
                    pilot=pilot,
                    variance=variance,
                    options=feasible + [o for o in options if o.cases is None],
                    recommended=recommended,
                    notes=comparison_notes,
                )
            )
    return Plan(
        run_dir=str(run_dir),
        detect=detect,
        power=power,
        alpha=alpha,
        benchmark_cases=len(everything),
        priced_on=model,
        comparisons=plans,
        notes=list(dict.fromkeys(notes)),
    )


def _clusters_text(clusters: dict[str, int]) -> str:
    return " x ".join(f"{g} {name} clusters" for name, g in clusters.items()) or "independent cases"


def _price(option: PlanOption) -> tuple[float, float, int]:
    """Cheapest first: dollars (high end), then calls (high end), then judgments."""
    cost = option.cost
    usd = cost.usd[1] if cost is not None and cost.usd is not None else math.inf
    calls = cost.calls[1] if cost is not None else math.inf
    return (usd, calls, option.judgments or 0)
