"""Where a score's variance comes from, and how many cases, epochs and judge repeats a difference needs.

variance_components(scores) -> VarianceComponents
    `scores`: case -> epoch -> the judge's repeat scores of that (case, epoch). A nested
    random-effects model, score = case + epoch-within-case + repeat-within-epoch, estimated by
    the method of moments (the ANOVA estimator, each level's pooled within-group variance less
    what the level below contributes to it; a negative estimate is set to 0, as usual):
      between_repeat  the judge's own variance: the pooled variance of the repeats of one response
      between_epoch   the system's: the pooled variance of one case's epoch means, less
                      between_repeat / repeats
      between_case    the cases': the variance of the case means, less what epochs and repeats
                      leave in them
    A level that was not repeated (one epoch; one repeat) is None: not measured, never 0.

cluster_components(case_values, design) -> per dimension the variance between its clusters
    From one-way cluster-robust variances: V_k ~ s_k^2/G_k + (s^2 - s_k^2)/n, solved for s_k^2.

required_cases(plan, ...) / planned_variance(plan, ...)
    The normal-theory guess where `atelier plan`'s search starts (the plan itself simulates the
    run's own test: `power.smallest_design`): Var(mean difference) for n cases, e epochs, r repeats =
        sum_k s_k^2 / G_k(n) + s_case^2 / n + s_epoch^2 / (n e) + s_repeat^2 / (n e r),
    where G_k(n) = n / (the pilot's cases per cluster of k), at most the clusters the benchmark
    has, and the smallest n whose (z_0.975 + z_0.8) x sqrt(Var) is at most the difference. It
    knows nothing of a test's few clusters (a sign-flip test over 5 clusters never rejects), which
    is why it is only a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from atelier.benchmarks.metrics.clusters import ClusterDesign, clustered_variance, z_sum


class VarianceComponents(BaseModel):
    """One cell's (system x judge) score variance, split by where it comes from."""

    between_case: float | None = Field(description="Variance of the true case means (cases differ).")
    between_epoch: float | None = Field(
        description="Variance between runs of the same case (the system's own; None: one epoch)."
    )
    between_repeat: float | None = Field(
        description="Variance between judgments of the same response (the judge's own; None: one repeat)."
    )
    shares: dict[str, float | None] = Field(
        default_factory=dict, description="Each component's share of their sum (None when not measured)."
    )
    n_cases: int
    epochs: float = Field(description="Mean scored epochs per case.")
    repeats: float = Field(description="Mean scored repeats per (case, epoch).")


def _pooled(groups: Sequence[np.ndarray]) -> float | None:
    """The pooled within-group variance (ddof 1) over groups of two or more, or None."""
    usable = [g for g in groups if g.size >= 2]
    df = sum(g.size - 1 for g in usable)
    if not df:
        return None
    return float(sum(np.sum((g - g.mean()) ** 2) for g in usable) / df)


def variance_components(scores: Mapping[str, Mapping[int, Sequence[float]]]) -> VarianceComponents:
    cells = {
        case: {epoch: np.asarray(list(values), dtype=float) for epoch, values in by_epoch.items() if len(values)}
        for case, by_epoch in scores.items()
    }
    cells = {case: by_epoch for case, by_epoch in cells.items() if by_epoch}
    repeats = [values for by_epoch in cells.values() for values in by_epoch.values()]
    repeat_var = _pooled(repeats)
    epoch_means = {case: np.asarray([v.mean() for v in by_epoch.values()]) for case, by_epoch in cells.items()}
    inv_repeats = float(np.mean([1 / v.size for v in repeats])) if repeats else 1.0
    within_case = _pooled(list(epoch_means.values()))
    epoch_var = None if within_case is None else max(0.0, within_case - (repeat_var or 0.0) * inv_repeats)
    case_means = np.asarray([m.mean() for m in epoch_means.values()])
    case_var: float | None = None
    if case_means.size >= 2:
        inv_epochs = float(np.mean([1 / m.size for m in epoch_means.values()]))
        inv_both = float(np.mean([np.mean([1 / v.size for v in by.values()]) / len(by) for by in cells.values()]))
        leftover = (epoch_var or 0.0) * inv_epochs + (repeat_var or 0.0) * inv_both
        case_var = max(0.0, float(np.var(case_means, ddof=1)) - leftover)
    parts = {"between_case": case_var, "between_epoch": epoch_var, "between_repeat": repeat_var}
    total = math.fsum(v for v in parts.values() if v is not None)
    return VarianceComponents(
        **parts,
        shares={k: (v / total if total > 0 else 0.0) if v is not None else None for k, v in parts.items()},
        n_cases=len(cells),
        epochs=float(np.mean([len(by) for by in cells.values()])) if cells else 0.0,
        repeats=float(np.mean([v.size for v in repeats])) if repeats else 0.0,
    )


def cluster_components(case_values: Sequence[float] | np.ndarray, design: ClusterDesign) -> dict[str, float]:
    """Per clustered dimension, the variance between its clusters' true means (see module docstring)."""
    x = np.asarray(case_values, dtype=float)
    n = x.size
    if n < 2:
        return {}
    s2 = float(np.var(x, ddof=1))
    out: dict[str, float] = {}
    for name, codes in zip(design.names, design.codes):
        g = int(codes.max()) + 1
        one_way = ClusterDesign(n, (name,), (codes,))
        v = clustered_variance(x, one_way)
        out[name] = max(0.0, (v - s2 / n) / (1 / g - 1 / n)) if g < n else 0.0
    return out


class PlanVariance(BaseModel):
    """The variance components of a paired difference a plan rests on (from a pilot)."""

    clusters: dict[str, float] = Field(default_factory=dict, description="Between-cluster variance per dimension.")
    cases_per_cluster: dict[str, float] = Field(default_factory=dict, description="The pilot's, per dimension.")
    max_clusters: dict[str, int] = Field(default_factory=dict, description="Clusters the benchmark has, per dimension.")
    case: float = Field(description="Between-case variance left after the clusters'.")
    epoch: float = Field(description="Between-epoch variance (0 when the pilot ran one epoch: said in notes).")
    repeat: float = Field(description="Between-judge-repeat variance (0 when the pilot judged once).")


def planned_variance(v: PlanVariance, n: int, epochs: int, repeats: int) -> float:
    """Var(mean difference) for n cases x epochs x judge repeats (see module docstring)."""
    total = 0.0
    for name, s2 in v.clusters.items():
        per = v.cases_per_cluster.get(name, 1.0)
        groups = max(1.0, n / per)
        if name in v.max_clusters:
            groups = min(groups, float(v.max_clusters[name]))
        total += s2 / groups
    return total + v.case / n + v.epoch / (n * epochs) + v.repeat / (n * epochs * repeats)


def detectable(v: PlanVariance, n: int, epochs: int, repeats: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The minimum detectable difference of that plan."""
    return z_sum(alpha, power) * math.sqrt(planned_variance(v, n, epochs, repeats))


def required_cases(
    v: PlanVariance, detect: float, epochs: int, repeats: int, max_cases: int, alpha: float = 0.05, power: float = 0.8
) -> int | None:
    """The fewest cases (2..max_cases) that detect `detect` at `power`; None when even max_cases do not."""
    if detectable(v, max_cases, epochs, repeats, alpha, power) > detect:
        return None
    low, high = 2, max_cases
    while low < high:  # the variance falls as n grows: the first n that detects
        mid = (low + high) // 2
        if detectable(v, mid, epochs, repeats, alpha, power) <= detect:
            high = mid
        else:
            low = mid + 1
    return low
