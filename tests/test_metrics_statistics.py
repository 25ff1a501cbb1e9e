"""Bootstrap confidence intervals and the paired significance test."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from atelier.benchmarks.metrics.statistics import (
    BootstrapInput,
    PairedTestInput,
    bootstrap_ci,
    bootstrap_summary,
    paired_test,
    paired_test_from_input,
)


def test_the_interval_of_a_mean_is_seed_free_and_deterministic() -> None:
    values = np.random.default_rng(3).normal(size=40).tolist()
    assert bootstrap_ci(values, seed=7) == bootstrap_ci(values, seed=8)  # a t interval: nothing is drawn
    low, high = bootstrap_ci(values)
    assert low < float(np.mean(values)) < high


def test_the_interval_of_a_mean_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(11)
    trials = 400
    covered = 0
    for _ in range(trials):
        sample = rng.exponential(scale=2.0, size=60)  # true mean 2, skewed
        low, high = bootstrap_ci(sample)
        covered += low <= 2.0 <= high
    # a t interval under-covers a little for skewed data; a broken interval lands far outside
    assert 0.90 <= covered / trials <= 0.98


def test_the_interval_of_a_mean_of_independent_cases_is_students_t() -> None:
    values = np.random.default_rng(5).normal(loc=10, scale=3, size=80)
    theirs = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert bootstrap_ci(values) == pytest.approx((theirs.low, theirs.high))


def test_bootstrap_ci_width_shrinks_with_more_data_and_lower_confidence() -> None:
    rng = np.random.default_rng(2)
    small, large = rng.normal(size=20), rng.normal(size=2000)
    width = lambda ci: ci.high - ci.low
    assert width(bootstrap_ci(large)) < width(bootstrap_ci(small))
    assert width(bootstrap_ci(small, confidence=0.5)) < width(bootstrap_ci(small, confidence=0.95))


def test_bootstrap_ci_small_samples() -> None:
    assert bootstrap_ci([]) == (None, None)
    assert bootstrap_ci([0.42]) == (0.42, 0.42)
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_bootstrap_ci_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([1.0, 2.0], n_resamples=0)


def test_bootstrap_summary_reports_mean_and_interval() -> None:
    result = bootstrap_summary(BootstrapInput(values=[1, 2, 3, 4], n_resamples=500))
    assert result.n == 4
    assert result.mean == 2.5
    assert (result.low, result.high) == bootstrap_ci([1, 2, 3, 4], n_resamples=500)
    assert bootstrap_summary(BootstrapInput(values=[])).mean is None


def test_identical_systems_are_not_significantly_different() -> None:
    scores = np.random.default_rng(4).uniform(size=30).tolist()
    result = paired_test(scores, scores)
    assert result.mean_difference == 0.0
    assert (result.ci_low, result.ci_high) == (0.0, 0.0)
    shifted = paired_test([s + 0.1 for s in scores], scores)  # the same difference on every case
    assert (shifted.ci_low, shifted.ci_high) == pytest.approx((0.1, 0.1)) and shifted.permutation_p < 0.001
    assert result.permutation_p == 1.0
    assert result.wilcoxon_p == 1.0


def test_false_positive_rate_under_the_null_is_close_to_alpha() -> None:
    rng = np.random.default_rng(9)
    trials = 200
    permutation_rejections = wilcoxon_rejections = 0
    for trial in range(trials):
        base = rng.uniform(size=20)
        a = base + rng.normal(scale=0.05, size=20)
        b = base + rng.normal(scale=0.05, size=20)
        result = paired_test(a, b, n_resamples=999, seed=trial)
        permutation_rejections += result.permutation_p < 0.05
        wilcoxon_rejections += result.wilcoxon_p < 0.05
    # Binomial(200, 0.05) lies in [2, 22] with probability > 0.999.
    assert 2 <= permutation_rejections <= 22
    assert 2 <= wilcoxon_rejections <= 22


def test_consistent_shift_is_significant_and_estimated() -> None:
    rng = np.random.default_rng(1)
    b = rng.uniform(size=30)
    a = b + 0.1 + rng.normal(scale=0.02, size=30)
    result = paired_test(a.tolist(), b.tolist())
    assert result.mean_difference == pytest.approx(float(np.mean(a - b)))
    assert result.ci_low < 0.1 < result.ci_high
    assert result.ci_low > 0
    assert result.permutation_p < 0.001
    assert result.wilcoxon_p < 0.001
    flipped = paired_test(b.tolist(), a.tolist())
    assert flipped.mean_difference == pytest.approx(-result.mean_difference)
    assert flipped.permutation_p == pytest.approx(result.permutation_p)


def test_small_samples_use_the_exact_permutation_distribution() -> None:
    # Five positive differences: only the all-positive and all-negative sign patterns are as extreme,
    # so p = 2 / 2^5 exactly, as in the exact Wilcoxon test.
    result = paired_test([2, 3, 4, 5, 6], [1, 1, 1, 1, 1])
    assert result.permutation_p == pytest.approx(2 / 32)
    assert result.wilcoxon_p == pytest.approx(2 / 32)


def test_paired_test_edge_cases() -> None:
    empty = paired_test([], [])
    assert empty.n == 0
    assert empty.mean_difference is None and empty.permutation_p is None and empty.wilcoxon_p is None
    single = paired_test([0.7], [0.5])
    assert single.mean_difference == pytest.approx(0.2)
    assert (single.ci_low, single.ci_high) == (None, None)  # one case: no test can reject, no interval
    assert single.permutation_p == 1.0 and not single.testable and single.mde is None
    with pytest.raises(ValueError, match="differ in length"):
        paired_test([1, 2], [1])


def test_paired_test_input_model() -> None:
    request = PairedTestInput(a=[1, 2, 3, 4], b=[0, 1, 2, 3], n_resamples=100, seed=3)
    assert paired_test_from_input(request) == paired_test([1, 2, 3, 4], [0, 1, 2, 3], n_resamples=100, seed=3)
    with pytest.raises(ValidationError, match="same cases"):
        PairedTestInput(a=[1, 2], b=[1])
