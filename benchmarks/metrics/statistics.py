"""Confidence intervals and paired significance tests for per-case scores. Seeded and deterministic.

The two entry points the experiment runner uses:

    bootstrap_ci(values, confidence=0.95, n_resamples=10_000, seed=0, clusters=None) -> ConfidenceInterval(low, high)
        Percentile bootstrap CI of the mean. It unpacks as `low, high = bootstrap_ci(...)`. n == 1,
        or n values all equal, gives (value, value): no spread to resample. n == 0 gives (None,
        None). The values are resampled in the order given, so callers that want the same interval
        from the same values in any order sort them first (runs/reading/summary.py does).
        With crossed `clusters` (below) it is a multiway cluster-robust t interval instead.
        `mean_interval` gives the same interval with what it rests on (method, clusters, design
        effect, minimum detectable difference).

    paired_test(a, b, confidence=0.95, n_resamples=10_000, seed=0, clusters=None) -> PairedTestResult
        Two systems scored on the same cases, a[i] and b[i] for case i. Reports the mean difference
        a - b with its bootstrap CI, the two-sided p-value of a paired permutation test (scipy
        `permutation_test`, swapping a and b within cases: exact when 2^n <= n_resamples, else Monte
        Carlo) and the two-sided p-value of scipy's Wilcoxon signed-rank test (zero differences
        dropped, scipy's default). When every difference is zero, or n == 1, both p-values are 1.
        With n == 0 every statistic is None.

    `clusters` (both): one label per value, or named label lists for a crossed design
    (`{"persona": [...], "task": [...]}`; see `clusters.ClusterDesign`). Given them, every figure
    takes the cluster as the unit:
      - one dimension: the interval is a percentile cluster bootstrap (scipy `bootstrap` over the
        clusters' sums and sizes, the mean as their ratio); `permutation_p` swaps a and b for whole
        clusters at once (a sign flip of each cluster's summed difference: scipy
        `permutation_test` on cluster sums); `wilcoxon_p` ranks the clusters' mean differences.
      - two or more crossed dimensions (PDR's persona x task): the multiway cluster-robust standard
        error (Cameron, Gelbach & Miller 2011) with a t reference on min(G) - 1 degrees of freedom
        (`clusters.multiway_t`): the interval is mean +- t x SE, and `permutation_p` is that t
        test's p-value. No permutation fits a crossed design (swapping a and b for whole personas
        leaves the task effects unshuffled, and the other way round: each one-way test rejects a
        true null too often), and the multiway (pigeonhole) bootstrap counts the residual variance
        about three times, an interval up to 1.7x too wide when cluster effects are weak; this SE is
        also the one the design effect, the mde and `atelier plan` rest on. `wilcoxon_p` is None (no
        rank test fits a crossed design).
    `design_effect` and `mde` rest on the cluster-robust variance of the mean (one-way CR1;
    Cameron-Gelbach-Miller for crossed designs): mde = (z_0.975 + z_0.8) * SE, the smallest true
    difference a 5% two-sided test detects with 80% power. `ci_method` and `p_method` name what was
    done; `cluster_notes` says what was dropped from the design and when there are too few clusters.

    epoch_spread(scores, epochs) -> EpochSpread
        One system run k times on the same cases (`[run] epochs`): the mean over cases of each
        case's standard deviation across epochs, and the standard deviation of the per-epoch means.
        With epochs the runner gives `bootstrap_ci` and `paired_test` each case's mean over its
        epochs: resampling cases with all their epochs, each case weighing the same.

The same seed always gives the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from pydantic import Field, FiniteFloat, StrictInt, StrictStr, model_validator
from scipy import stats

from atelier.benchmarks.metrics.clusters import (
    ClusterDesign,
    Clusters,
    cluster_sums,
    design_effect,
    minimum_detectable,
    multiway_t,
    standard_error,
)
from atelier.benchmarks.metrics.models import MetricInput, MetricResult

DEFAULT_RESAMPLES = 10_000
# Bounds the resamples scipy builds at once (resamples x n values) to keep memory small for long runs.
_MAX_VALUES_PER_BATCH = 2_000_000


class ConfidenceInterval(NamedTuple):
    low: float | None
    high: float | None


CASE_METHOD = "percentile bootstrap over cases (independent)"
CASE_TEST = "paired permutation over cases (a and b swapped within each case)"


class IntervalResult(MetricResult):
    """The mean with its interval and what the interval rests on."""

    n: int
    mean: float | None
    low: float | None
    high: float | None
    confidence: float
    ci_method: str = Field(
        description="How the interval was made (cases, a one-way cluster bootstrap, a multiway cluster-robust t)."
    )
    n_clusters: dict[str, int] = Field(
        default_factory=dict, description="Clusters per dimension the figures resampled (empty: independent cases)."
    )
    design_effect: float | None = Field(
        default=None,
        description="Cluster-robust variance of the mean over the independent-cases variance s^2/n "
        "(n / design_effect is the effective n); None when every value is equal.",
    )
    mde: float | None = Field(
        default=None,
        description="Minimum detectable difference at 80% power, 5% two-sided: (z_0.975 + z_0.8) x the "
        "cluster-robust standard error of the mean.",
    )
    cluster_notes: list[str] = Field(
        default_factory=list, description="Dimensions dropped from the design, and too few clusters, in words."
    )


def bootstrap_ci(
    values: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: Clusters | None = None,
) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval of the mean of `values` (clusters resampled when given)."""
    result = mean_interval(values, confidence, n_resamples, seed, clusters)
    return ConfidenceInterval(result.low, result.high)


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: Clusters | None = None,
) -> IntervalResult:
    """The mean of `values`, its percentile bootstrap interval, and what it rests on."""
    data = _as_finite_array(values, "values")
    _check_settings(confidence, n_resamples)
    design = ClusterDesign.of(clusters, data.size)
    ci, _ = _interval(data, design, confidence, n_resamples, seed)
    return IntervalResult(
        n=int(data.size),
        mean=math.fsum(data.tolist()) / data.size if data.size else None,
        low=ci.low,
        high=ci.high,
        confidence=confidence,
        **_design_figures(data, design),
    )


def _design_figures(data: np.ndarray, design: ClusterDesign) -> dict[str, Any]:
    """ci_method, n_clusters, design_effect, mde and cluster_notes of `data` under `design`."""
    return {
        "ci_method": _ci_method(design),
        "n_clusters": design.levels,
        "design_effect": design_effect(data, design) if design.clustered else (1.0 if data.size >= 2 else None),
        "mde": minimum_detectable(standard_error(data, design)) if data.size >= 2 else None,
        "cluster_notes": [*design.notes, *design.warnings()],
    }


def _ci_method(design: ClusterDesign) -> str:
    if not design.clustered:
        return CASE_METHOD
    if len(design.names) == 1:
        return f"percentile cluster bootstrap over {design.describe()}"
    return f"multiway cluster-robust SE (Cameron-Gelbach-Miller), t on min(G)-1 df, over {design.describe()}"


def _interval(
    data: np.ndarray, design: ClusterDesign, confidence: float, n_resamples: int, seed: int
) -> tuple[ConfidenceInterval, float | None]:
    """The interval of the mean, and for a crossed design the p-value of its t test (mean = 0)."""
    if data.size == 0:
        return ConfidenceInterval(None, None), None
    if np.all(data == data[0]):  # one value, or many equal ones: every resample has that mean
        return ConfidenceInterval(float(data[0]), float(data[0])), None
    rng = np.random.default_rng(seed)
    if not design.clustered:
        result = stats.bootstrap(
            (data,),
            np.mean,
            n_resamples=n_resamples,
            batch=max(1, _MAX_VALUES_PER_BATCH // data.size),
            vectorized=True,
            confidence_level=confidence,
            method="percentile",
            rng=rng,
        )
        return ConfidenceInterval(float(result.confidence_interval.low), float(result.confidence_interval.high)), None
    if len(design.names) == 1:
        sums, sizes = cluster_sums(data, design.codes[0])
        result = stats.bootstrap(
            (sums, sizes),
            _ratio_of_sums,
            paired=True,
            n_resamples=n_resamples,
            batch=max(1, _MAX_VALUES_PER_BATCH // sums.size),
            vectorized=True,
            confidence_level=confidence,
            method="percentile",
            rng=rng,
        )
        return ConfidenceInterval(float(result.confidence_interval.low), float(result.confidence_interval.high)), None
    low, high, p = multiway_t(data, design, confidence)
    return ConfidenceInterval(low, high), p


def _ratio_of_sums(sums: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(sums, axis=axis) / np.sum(sizes, axis=axis)


class PairedTestResult(MetricResult):
    n: int = Field(description="Number of paired cases.")
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None = Field(description="Mean of a - b.")
    ci_low: float | None = Field(description="Bootstrap CI of the mean difference, lower bound.")
    ci_high: float | None = Field(description="Bootstrap CI of the mean difference, upper bound.")
    confidence: float
    permutation_p: float | None = Field(
        description="Two-sided p-value of the paired test `p_method` names (a permutation over cases or "
        "clusters; for crossed clusters, the multiway cluster-robust t test)."
    )
    wilcoxon_p: float | None = Field(
        description="Two-sided Wilcoxon signed-rank p-value (over cluster means when clustered one-way; "
        "None for crossed clusters)."
    )
    ci_method: str = Field(default=CASE_METHOD, description="How the interval of the difference was made.")
    p_method: str = Field(default=CASE_TEST, description="What `permutation_p` tests.")
    n_clusters: dict[str, int] = Field(
        default_factory=dict, description="Clusters per dimension (empty: independent cases)."
    )
    design_effect: float | None = Field(
        default=None, description="Cluster-robust variance of the mean difference over s^2/n of the differences."
    )
    mde: float | None = Field(
        default=None,
        description="Minimum detectable difference at 80% power, 5% two-sided, for these cases, clusters and "
        "variance: (z_0.975 + z_0.8) x the cluster-robust SE of the mean difference.",
    )
    cluster_notes: list[str] = Field(default_factory=list)


def paired_test(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: Clusters | None = None,
) -> PairedTestResult:
    """Compare two systems scored on the same cases (a[i] and b[i] belong to case i)."""
    first = _as_finite_array(a, "a")
    second = _as_finite_array(b, "b")
    if first.size != second.size:
        raise ValueError(f"paired scores differ in length: {first.size} vs {second.size}")
    _check_settings(confidence, n_resamples)
    n = int(first.size)
    design = ClusterDesign.of(clusters, n)
    differences = first - second
    figures = _design_figures(differences, design)
    del figures["ci_method"]
    if n == 0:
        return PairedTestResult(
            n=0,
            mean_a=None,
            mean_b=None,
            mean_difference=None,
            ci_low=None,
            ci_high=None,
            confidence=confidence,
            permutation_p=None,
            wilcoxon_p=None,
            ci_method=_ci_method(design),
            p_method=_p_method(design),
            **figures,
        )
    ci, t_test_p = _interval(differences, design, confidence, n_resamples, seed)
    if not design.clustered:
        permutation, wilcoxon = _permutation_p(first, second, n_resamples, seed), _wilcoxon_p(differences)
    elif len(design.names) == 1:
        codes = design.codes[0]
        sums_a, sizes = cluster_sums(first, codes)
        sums_b, _ = cluster_sums(second, codes)
        permutation = _permutation_p(sums_a, sums_b, n_resamples, seed)
        wilcoxon = _wilcoxon_p((sums_a - sums_b) / sizes)
    else:
        permutation = 1.0 if t_test_p is None else t_test_p
        wilcoxon = None
    return PairedTestResult(
        n=n,
        mean_a=float(first.mean()),
        mean_b=float(second.mean()),
        mean_difference=float(differences.mean()),
        ci_low=ci.low,
        ci_high=ci.high,
        confidence=confidence,
        permutation_p=permutation,
        wilcoxon_p=wilcoxon,
        ci_method=_ci_method(design),
        p_method=_p_method(design),
        **figures,
    )


def _p_method(design: ClusterDesign) -> str:
    if not design.clustered:
        return CASE_TEST
    if len(design.names) == 1:
        return f"cluster permutation over {design.describe()} (a and b swapped for whole clusters)"
    return f"multiway cluster-robust t test over {design.describe()} (no permutation fits a crossed design)"


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def _permutation_p(first: np.ndarray, second: np.ndarray, n_resamples: int, seed: int) -> float:
    # With one case both sign patterns are as extreme as the observed one, so p = 1 (scipy needs two).
    if first.size < 2 or np.all(first == second):
        return 1.0
    result = stats.permutation_test(
        (first, second),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)


def _wilcoxon_p(differences: np.ndarray) -> float | None:
    nonzero = differences[differences != 0]
    if nonzero.size == 0:
        return 1.0
    return float(stats.wilcoxon(nonzero).pvalue)


def _as_finite_array(values: Sequence[float], name: str) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ValueError(f"{name} must be a flat list of numbers")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return data


def _check_settings(confidence: float, n_resamples: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


ClusterLabels = list[StrictStr | StrictInt] | dict[str, list[StrictStr | StrictInt]]
_CLUSTERS_HELP = (
    "Cluster labels: one per value (users, conversations, ...), or a table of named label lists for a "
    'crossed design ({"persona": [...], "task": [...]}). Given them, intervals and p-values resample clusters.'
)


def _check_labels(clusters: ClusterLabels | None, n: int) -> None:
    if clusters is None:
        return
    named = clusters if isinstance(clusters, dict) else {"clusters": clusters}
    for name, labels in named.items():
        if len(labels) != n:
            where = "clusters" if name == "clusters" else f"clusters.{name}"
            raise ValueError(f"{where}: {len(labels)} labels for {n} values (one label per value)")


class BootstrapInput(MetricInput):
    values: list[FiniteFloat] = Field(description="Per-case scores of one system (may be empty).")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Confidence level of the interval.")
    n_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=1, description="Bootstrap resamples.")
    seed: int = Field(default=0, description="Seed of numpy's default_rng.")
    clusters: ClusterLabels | None = Field(default=None, description=_CLUSTERS_HELP)

    @model_validator(mode="after")
    def _labelled(self) -> BootstrapInput:
        _check_labels(self.clusters, len(self.values))
        return self


class BootstrapResult(IntervalResult):
    pass


def bootstrap_summary(request: BootstrapInput) -> BootstrapResult:
    result = mean_interval(request.values, request.confidence, request.n_resamples, request.seed, request.clusters)
    return BootstrapResult(**result.model_dump())


class PairedTestInput(MetricInput):
    a: list[FiniteFloat] = Field(description="Per-case scores of system A.")
    b: list[FiniteFloat] = Field(description="Per-case scores of system B on the same cases, in the same order.")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Confidence level of the CI.")
    n_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=1, description="Bootstrap and permutation resamples.")
    seed: int = Field(default=0, description="Seed for the bootstrap and the permutation test.")
    clusters: ClusterLabels | None = Field(default=None, description=_CLUSTERS_HELP)

    @model_validator(mode="after")
    def _paired(self) -> PairedTestInput:
        if len(self.a) != len(self.b):
            raise ValueError(f"a and b must score the same cases: {len(self.a)} vs {len(self.b)} values")
        _check_labels(self.clusters, len(self.a))
        return self


def paired_test_from_input(request: PairedTestInput) -> PairedTestResult:
    return paired_test(request.a, request.b, request.confidence, request.n_resamples, request.seed, request.clusters)


class EpochSpread(MetricResult):
    """How much one system's score moves between runs of the same cases (epochs)."""

    epochs: int = Field(description="Epochs the run asked for.")
    n_scores: int = Field(description="(case, epoch) scores the figures rest on.")
    n_cases_repeated: int = Field(description="Cases scored in at least two epochs (the within-case figures).")
    mean_case_std: float | None = Field(
        description="Mean over cases of each case's sample standard deviation across its epochs (ddof 1); "
        "None when no case has two scored epochs."
    )
    epoch_means: list[float | None] = Field(
        description="Per epoch, the system's mean over the cases scored in it (None: none was)."
    )
    epoch_means_std: float | None = Field(
        description="Sample standard deviation (ddof 1) of the per-epoch means; None with fewer than two."
    )


def epoch_spread(scores: dict[str, dict[int, float]], epochs: int) -> EpochSpread:
    """`scores`: case id -> epoch (1..epochs) -> score. The spread between epochs, as the mean
    per-case standard deviation across epochs and the standard deviation of the per-epoch means."""
    per_case = [np.asarray(list(by_epoch.values()), dtype=float) for by_epoch in scores.values()]
    repeated = [values for values in per_case if values.size >= 2]
    stds = [float(np.std(values, ddof=1)) for values in repeated]
    means: list[float | None] = []
    for epoch in range(1, epochs + 1):
        values = [by_epoch[epoch] for by_epoch in scores.values() if epoch in by_epoch]
        means.append(math.fsum(values) / len(values) if values else None)
    present = [m for m in means if m is not None]
    return EpochSpread(
        epochs=epochs,
        n_scores=sum(values.size for values in per_case),
        n_cases_repeated=len(repeated),
        mean_case_std=math.fsum(stds) / len(stds) if stds else None,
        epoch_means=means,
        epoch_means_std=float(np.std(present, ddof=1)) if len(present) >= 2 else None,
    )
