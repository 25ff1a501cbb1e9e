"""Confidence intervals and paired significance tests for per-case scores. Seeded and deterministic.

The entry points the experiment runner uses (each batched procedure is in `procedures`):

    mean_interval(values, confidence=0.95, n_resamples=10_000, seed=0, clusters=None) -> IntervalResult
        The mean and its t interval: Student's t over independent cases; with one dimension of
        clusters the CR2 cluster-robust standard error with Bell-McCaffrey degrees of freedom; with
        crossed clusters the multiway cluster-robust t (below). n == 1, or n values all equal,
        gives (value, value); n == 0 gives (None, None). `bootstrap_ci` is the same interval as a
        (low, high) pair (its name is historical; nothing is resampled).

    difference_test(differences, ...) / paired_test(a, b, ...) -> PairedTestResult
        Any paired difference per case (two systems, a case's own context against a control, ...):
        the mean difference, the two-sided p of a sign-flip test (a and b swapped within a case, or
        for a whole cluster at once: each unit's summed difference flips its sign; exact over all
        2^G patterns when 2^G <= n_resamples, else n_resamples seeded patterns) and the interval
        that inverts that very test (`sign_flip`): it excludes 0 exactly when p < 1 - confidence.
        With crossed clusters, the multiway t, whose interval and test are one inequality too.
        `paired_test` adds each side's mean and a Wilcoxon signed-rank p (over cluster means when
        clustered one-way; None when crossed): a second opinion, not the test the interval inverts.
        A design whose test cannot reject (5 clusters: the smallest p is 2/32) has `testable`
        false, an unbounded interval (None ends), no `mde`, and a note saying why. When every
        difference is zero, p is 1; with n == 0 every statistic is None.

    `clusters` (all): one label per value, or named label lists for a crossed design
    (`{"persona": [...], "task": [...]}`; see `clusters.ClusterDesign`). Given them, every figure
    takes the cluster as the unit. Why these procedures, and their measured coverage and size at
    5 to 50 clusters, is in docs/statistics.md (`calibration` regenerates the figures).

    `mde`: the smallest true difference the test declares with 80% power at 1 - confidence, for
    these cases, clusters and the variance the data show: simulated (`power.design_power`: the
    run's own test on datasets of this design) for a sign-flip test, the noncentral t for a t test.
    `design_effect` (the cluster-robust variance of the mean over s^2/n), `ci_method`, `p_method`,
    `n_clusters` and `cluster_notes` (dimensions dropped, too few clusters, an untestable design)
    say what each figure rests on.

    epoch_spread(scores, epochs) -> EpochSpread
        One system run k times on the same cases (`[run] epochs`): the mean over cases of each
        case's standard deviation across epochs, and the standard deviation of the per-epoch means.
        With epochs the runner gives `mean_interval` and `paired_test` each case's mean over its
        epochs: each case weighing the same.

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
    multiway_df,
    standard_error,
    t_detectable,
)
from atelier.benchmarks.metrics.models import MetricInput, MetricResult
from atelier.benchmarks.metrics.power import Components, design_power
from atelier.benchmarks.metrics.procedures import DifferenceProcedure, MeanProcedure

DEFAULT_RESAMPLES = 10_000
# null datasets simulated for a paired test's mde (the run's own test applied to each): the mde's
# Monte Carlo error is a few percent of it; `atelier plan` simulates more
MDE_DATASETS = 400
MDE_POWER = 0.8


class ConfidenceInterval(NamedTuple):
    low: float | None
    high: float | None


CASE_METHOD = "Student t over cases (independent)"
CASE_TEST = "sign-flip test over cases (a and b swapped within each case), interval by inverting it"


class IntervalResult(MetricResult):
    """The mean with its interval and what the interval rests on."""

    n: int
    mean: float | None
    low: float | None
    high: float | None
    confidence: float
    ci_method: str = Field(
        description="How the interval was made (Student t over cases, CR2 cluster-robust t with Bell-McCaffrey "
        "df over one cluster dimension, multiway cluster-robust t over crossed ones)."
    )
    df: float | None = Field(default=None, description="The t reference's degrees of freedom.")
    n_clusters: dict[str, int] = Field(
        default_factory=dict, description="Clusters per dimension the figures rest on (empty: independent cases)."
    )
    design_effect: float | None = Field(
        default=None,
        description="Cluster-robust variance of the mean over the independent-cases variance s^2/n "
        "(n / design_effect is the effective n); None when every value is equal.",
    )
    mde: float | None = Field(
        default=None,
        description="Minimum detectable difference at 80% power of the interval's own t test at 1 - confidence "
        "(normal data): the noncentrality reaching 80% power on its df, times its standard error.",
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
    """The confidence interval of the mean of `values` (`mean_interval`; the name is historical: the
    interval is a t interval, cluster-robust when `clusters` are given; `n_resamples` and `seed` are
    accepted and unused)."""
    result = mean_interval(values, confidence, n_resamples, seed, clusters)
    return ConfidenceInterval(result.low, result.high)


def percentile_bootstrap(
    values: Sequence[float], confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> ConfidenceInterval:
    """The percentile bootstrap interval of the mean of independent `values` (seeded; resampled in
    the order given). Kept for a proportion whose interval must stay within [0, 1] (`agreement`'s
    PCA); a run's intervals are `mean_interval`'s and `difference_test`'s."""
    data = _as_finite_array(values, "values")
    _check_settings(confidence, n_resamples)
    if data.size == 0:
        return ConfidenceInterval(None, None)
    if np.all(data == data[0]):
        return ConfidenceInterval(float(data[0]), float(data[0]))
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=n_resamples,
        batch=max(1, 2_000_000 // data.size),
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return ConfidenceInterval(float(result.confidence_interval.low), float(result.confidence_interval.high))


def mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: Clusters | None = None,
) -> IntervalResult:
    """The mean of `values`, its interval (`procedures.MeanProcedure`), and what it rests on."""
    data = _as_finite_array(values, "values")
    _check_settings(confidence, n_resamples)
    design = ClusterDesign.of(clusters, data.size)
    procedure = MeanProcedure(design, confidence)
    mean = math.fsum(data.tolist()) / data.size if data.size else None
    low = high = df = mde = None
    if data.size == 1 or (data.size and np.all(data == data[0])):  # no spread: every interval is the value
        low = high = float(data[0])
    elif data.size:
        analysis = procedure.analyse(data)
        low, high, df = float(analysis.low[0]), float(analysis.high[0]), analysis.df
        se = (high - low) / 2 / float(stats.t.ppf(1 - (1 - confidence) / 2, df)) if df else None
        mde = t_detectable(se, df, 1 - confidence, MDE_POWER) if se is not None and df else None
    return IntervalResult(
        n=int(data.size),
        mean=mean,
        low=low,
        high=high,
        confidence=confidence,
        ci_method=procedure.method,
        df=df,
        n_clusters=design.levels,
        design_effect=_design_effect(data, design),
        mde=mde,
        cluster_notes=[*design.notes, *design.warnings()],
    )


def _design_effect(data: np.ndarray, design: ClusterDesign) -> float | None:
    if design.clustered:
        return design_effect(data, design)
    return 1.0 if data.size >= 2 and float(np.var(data, ddof=1)) > 0 else None


class PairedTestResult(MetricResult):
    n: int = Field(description="Number of paired cases.")
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None = Field(description="Mean of a - b.")
    ci_low: float | None = Field(
        description="The interval of the mean difference that inverts the test, lower end (None: unbounded, or no case)."
    )
    ci_high: float | None = Field(description="Its upper end (None: unbounded, or no case).")
    confidence: float
    permutation_p: float | None = Field(
        description="Two-sided p-value of the paired test `p_method` names (a sign-flip test over cases or "
        "clusters; for crossed clusters, the multiway cluster-robust t test). The interval excludes 0 exactly "
        "when it is below 1 - confidence."
    )
    wilcoxon_p: float | None = Field(
        description="Two-sided Wilcoxon signed-rank p-value (over cluster means when clustered one-way; "
        "None for crossed clusters): a second opinion, not the test the interval inverts."
    )
    ci_method: str = Field(default=CASE_TEST, description="How the interval of the difference was made.")
    p_method: str = Field(default=CASE_TEST, description="What `permutation_p` tests.")
    smallest_p: float | None = Field(
        default=None, description="The smallest p the test can give with these cases and clusters (0: a t test)."
    )
    testable: bool = Field(
        default=True,
        description="Whether the test can reject at 1 - confidence with this design (false: no difference can be "
        "declared, the interval is unbounded and there is no mde).",
    )
    n_clusters: dict[str, int] = Field(
        default_factory=dict, description="Clusters per dimension (empty: independent cases)."
    )
    design_effect: float | None = Field(
        default=None, description="Cluster-robust variance of the mean difference over s^2/n of the differences."
    )
    mde: float | None = Field(
        default=None,
        description="Minimum detectable difference: the smallest true difference the test declares with 80% "
        f"power at 1 - confidence, for these cases, clusters and variance; by simulation of {MDE_DATASETS:,} "
        "datasets analysed with this very test (crossed clusters: the noncentral t). None when untestable.",
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
    test = difference_test(first - second, confidence, n_resamples, seed, clusters)
    if test.n:
        design = ClusterDesign.of(clusters, test.n)
        differences = first - second
        if design.clustered and len(design.names) == 1:
            sums, sizes = cluster_sums(differences, design.codes[0])
            wilcoxon: float | None = _wilcoxon_p(sums / sizes)
        else:
            wilcoxon = None if design.clustered else _wilcoxon_p(differences)
        test = test.model_copy(
            update={"mean_a": float(first.mean()), "mean_b": float(second.mean()), "wilcoxon_p": wilcoxon}
        )
    return test


def difference_test(
    differences: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: Clusters | None = None,
) -> PairedTestResult:
    """The test of "no difference" and its interval for any paired difference per case (system a
    minus system b, a case's own context minus a control's, ...), clusters as `paired_test`'s;
    `mean_a`, `mean_b` and `wilcoxon_p` are left None."""
    data = _as_finite_array(differences, "differences")
    _check_settings(confidence, n_resamples)
    n = int(data.size)
    design = ClusterDesign.of(clusters, n)
    procedure = DifferenceProcedure(design, confidence, n_resamples, seed)
    figures: dict[str, Any] = {
        "n": n,
        "mean_a": None,
        "mean_b": None,
        "confidence": confidence,
        "wilcoxon_p": None,
        "ci_method": procedure.method,
        "p_method": procedure.method,
        "n_clusters": design.levels,
        "design_effect": _design_effect(data, design),
        "cluster_notes": [*design.notes, *design.warnings()],
    }
    if n == 0:
        return PairedTestResult(
            mean_difference=None, ci_low=None, ci_high=None, permutation_p=None, testable=False, **figures
        )
    testable = procedure.testable
    notes = figures["cluster_notes"] if testable else [*figures["cluster_notes"], procedure.why_untestable()]
    analysis = procedure.analyse(data)
    low, high = float(analysis.low[0]), float(analysis.high[0])
    if math.isfinite(low) and math.isfinite(high) and np.all(data == data[0]):
        low = high = float(data[0])  # no spread: the interval is the value itself (the test's own ends are it)
    return PairedTestResult(
        **{**figures, "cluster_notes": notes},
        mean_difference=float(data.mean()),
        ci_low=low if math.isfinite(low) else None,
        ci_high=high if math.isfinite(high) else None,
        permutation_p=float(analysis.p[0]),
        smallest_p=procedure.smallest_p,
        testable=testable,
        mde=_difference_mde(data, procedure) if testable else None,
    )


def _difference_mde(data: np.ndarray, procedure: DifferenceProcedure) -> float | None:
    """The smallest true difference the procedure declares with 80% power, for data like `data`
    (`power.design_power`: a simulation of the test on this design, with the variance `data` shows)."""
    if data.size < 2 or float(np.var(data, ddof=1)) == 0.0:
        return None
    alpha = 1 - procedure.confidence
    if procedure.crossed:
        return t_detectable(standard_error(data, procedure.design), float(multiway_df(procedure.design)), alpha)
    components = Components.estimate(data, procedure.design)
    return design_power(procedure, components, None, MDE_DATASETS, procedure.seed, target=MDE_POWER).detectable


def _wilcoxon_p(differences: np.ndarray) -> float | None:
    nonzero = differences[differences != 0]
    if nonzero.size == 0:
        return 1.0
    return float(stats.wilcoxon(nonzero).pvalue)


def _as_finite_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
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
