"""Confidence intervals and paired significance tests for per-case scores. Seeded and deterministic.

The two entry points the experiment runner uses:

    bootstrap_ci(values, confidence=0.95, n_resamples=10_000, seed=0) -> ConfidenceInterval(low, high)
        Percentile bootstrap CI of the mean (scipy `bootstrap`, method="percentile"). It unpacks as
        `low, high = bootstrap_ci(...)`. n == 1, or n values all equal, gives (value, value): no
        spread to resample. n == 0 gives (None, None). The values are resampled in the order given,
        so callers that want the same interval from the same values in any order sort them first
        (runs/reading/summary.py does).

    paired_test(a, b, confidence=0.95, n_resamples=10_000, seed=0) -> PairedTestResult
        Two systems scored on the same cases, a[i] and b[i] for case i. Reports the mean difference
        a - b with its bootstrap CI, the two-sided p-value of a paired permutation test (scipy
        `permutation_test`, swapping a and b within cases: exact when 2^n <= n_resamples, else Monte
        Carlo) and the two-sided p-value of scipy's Wilcoxon signed-rank test (zero differences
        dropped, scipy's default). When every difference is zero, or n == 1, both p-values are 1.
        With n == 0 every statistic is None.

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
from typing import NamedTuple

import numpy as np
from pydantic import Field, FiniteFloat, model_validator
from scipy import stats

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

DEFAULT_RESAMPLES = 10_000
# Bounds the resamples scipy builds at once (resamples x n values) to keep memory small for long runs.
_MAX_VALUES_PER_BATCH = 2_000_000


class ConfidenceInterval(NamedTuple):
    low: float | None
    high: float | None


def bootstrap_ci(
    values: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval of the mean of `values`."""
    data = _as_finite_array(values, "values")
    _check_settings(confidence, n_resamples)
    if data.size == 0:
        return ConfidenceInterval(None, None)
    if np.all(data == data[0]):  # one value, or many equal ones: every resample has that mean
        return ConfidenceInterval(float(data[0]), float(data[0]))
    result = stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=n_resamples,
        batch=max(1, _MAX_VALUES_PER_BATCH // data.size),
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return ConfidenceInterval(float(result.confidence_interval.low), float(result.confidence_interval.high))


class PairedTestResult(MetricResult):
    n: int = Field(description="Number of paired cases.")
    mean_a: float | None
    mean_b: float | None
    mean_difference: float | None = Field(description="Mean of a - b.")
    ci_low: float | None = Field(description="Bootstrap CI of the mean difference, lower bound.")
    ci_high: float | None = Field(description="Bootstrap CI of the mean difference, upper bound.")
    confidence: float
    permutation_p: float | None = Field(description="Two-sided paired permutation test p-value.")
    wilcoxon_p: float | None = Field(description="Two-sided Wilcoxon signed-rank p-value.")


def paired_test(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> PairedTestResult:
    """Compare two systems scored on the same cases (a[i] and b[i] belong to case i)."""
    first = _as_finite_array(a, "a")
    second = _as_finite_array(b, "b")
    if first.size != second.size:
        raise ValueError(f"paired scores differ in length: {first.size} vs {second.size}")
    _check_settings(confidence, n_resamples)
    n = int(first.size)
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
        )
    differences = first - second
    ci = bootstrap_ci(differences, confidence, n_resamples, seed)
    return PairedTestResult(
        n=n,
        mean_a=float(first.mean()),
        mean_b=float(second.mean()),
        mean_difference=float(differences.mean()),
        ci_low=ci.low,
        ci_high=ci.high,
        confidence=confidence,
        permutation_p=_permutation_p(first, second, n_resamples, seed),
        wilcoxon_p=_wilcoxon_p(differences),
    )


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


class BootstrapInput(MetricInput):
    values: list[FiniteFloat] = Field(description="Per-case scores of one system (may be empty).")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Confidence level of the interval.")
    n_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=1, description="Bootstrap resamples.")
    seed: int = Field(default=0, description="Seed of numpy's default_rng.")


class BootstrapResult(MetricResult):
    n: int
    mean: float | None
    low: float | None
    high: float | None
    confidence: float


def bootstrap_summary(request: BootstrapInput) -> BootstrapResult:
    low, high = bootstrap_ci(request.values, request.confidence, request.n_resamples, request.seed)
    mean = math.fsum(request.values) / len(request.values) if request.values else None
    return BootstrapResult(n=len(request.values), mean=mean, low=low, high=high, confidence=request.confidence)


class PairedTestInput(MetricInput):
    a: list[FiniteFloat] = Field(description="Per-case scores of system A.")
    b: list[FiniteFloat] = Field(description="Per-case scores of system B on the same cases, in the same order.")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Confidence level of the CI.")
    n_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=1, description="Bootstrap and permutation resamples.")
    seed: int = Field(default=0, description="Seed for the bootstrap and the permutation test.")

    @model_validator(mode="after")
    def _paired(self) -> PairedTestInput:
        if len(self.a) != len(self.b):
            raise ValueError(f"a and b must score the same cases: {len(self.a)} vs {len(self.b)} values")
        return self


def paired_test_from_input(request: PairedTestInput) -> PairedTestResult:
    return paired_test(request.a, request.b, request.confidence, request.n_resamples, request.seed)


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
