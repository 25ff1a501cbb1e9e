"""Issue 50, deliver 2: the interval of a paired difference is the inversion of the test the run
applies, so "the CI excludes 0" and "p < 0.05" agree on every dataset (ties, few clusters, crossed
designs included); a design whose test cannot reject has no interval and no MDE, and says why."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from atelier.benchmarks.metrics.clusters import MIN_CLUSTERS, ClusterDesign, bell_mccaffrey_df, cr2_rows
from atelier.benchmarks.metrics.power import Components, PowerCurve, simulate
from atelier.benchmarks.metrics.procedures import DifferenceProcedure, MeanProcedure
from atelier.benchmarks.metrics.sign_flip import sign_flip, sign_patterns, smallest_p
from atelier.benchmarks.metrics.statistics import difference_test, mean_interval, paired_test


def _excludes_zero(result) -> bool:
    low = -np.inf if result.ci_low is None else result.ci_low
    high = np.inf if result.ci_high is None else result.ci_high
    return not low <= 0 <= high


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0, 0.25, -0.25]), min_size=2, max_size=40),
    groups=st.integers(1, 14),
    seed=st.integers(0, 3),
    shift=st.sampled_from([0.0, 0.25, 0.5]),
)
def test_on_any_data_the_interval_excludes_zero_exactly_when_p_is_below_alpha(values, groups, seed, shift) -> None:
    """Discrete scores (ties everywhere), one-way clusters from 1 to 14, and independent cases."""
    differences = [v + shift for v in values]
    labels = [f"g{i % groups}" for i in range(len(values))]
    for clusters in (labels, None):
        result = difference_test(differences, n_resamples=2000, seed=seed, clusters=clusters)
        assert _excludes_zero(result) == (result.permutation_p < 0.05), result
        if result.ci_low is not None:
            assert result.ci_low <= result.mean_difference <= result.ci_high


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cases=st.integers(12, 60), effect=st.sampled_from([0.0, 0.3, 1.0]))
def test_crossed_designs_agree_too(seed, cases, effect) -> None:
    rng = np.random.default_rng(seed)
    personas, tasks = rng.integers(0, 6, cases), rng.integers(0, 9, cases)
    d = effect + rng.normal(size=6)[personas] + rng.normal(size=9)[tasks] + rng.normal(size=cases)
    result = difference_test(d, clusters={"persona": personas.tolist(), "task": tasks.tolist()})
    assert _excludes_zero(result) == (result.permutation_p < 0.05)


def test_the_sign_flip_p_is_scipys_exact_permutation_p() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        d = rng.normal(0.3, 1, 9)
        ours = difference_test(d).permutation_p
        theirs = stats.permutation_test(
            (d, np.zeros_like(d)),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=10_000,
        ).pvalue
        assert ours == pytest.approx(theirs)


def test_the_interval_ends_are_where_the_test_turns() -> None:
    """Testing `d - mu` for mu just inside an end gives p >= 0.05, just outside p < 0.05."""
    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(12), 4)
    d = rng.normal(0.4, 1, 12)[labels] + rng.normal(0, 1, labels.size)
    result = difference_test(d, clusters=labels.tolist())
    for end, inside in ((result.ci_low, 1e-6), (result.ci_high, -1e-6)):
        assert difference_test(d - (end + inside), clusters=labels.tolist()).permutation_p >= 0.05
        assert difference_test(d - (end - inside), clusters=labels.tolist()).permutation_p < 0.05


def test_five_clusters_can_never_reject_and_say_so() -> None:
    labels = [f"u{i % 5}" for i in range(20)]
    result = paired_test([1.0] * 20, [0.0] * 20, clusters=labels)  # a as far above b as data can be
    assert result.permutation_p == pytest.approx(2 / 32) and not result.testable
    assert (result.ci_low, result.ci_high, result.mde) == (None, None, None)
    assert any(
        "with 5 clusters the smallest p the sign-flip test can give is 0.0625" in n for n in result.cluster_notes
    )
    assert smallest_p(5, 10_000) == 0.0625 and smallest_p(6, 10_000) == pytest.approx(2 / 64)
    six = paired_test([1.0] * 24, [0.0] * 24, clusters=[f"u{i % 6}" for i in range(24)])
    assert six.testable and six.permutation_p < 0.05 and six.ci_low is not None
    # independent cases: five of them are untestable too
    assert not difference_test([0.2, 0.3, 0.4, 0.5, 0.6]).testable


def test_few_clusters_are_warned_below_the_measured_threshold() -> None:
    below = ClusterDesign.of([f"u{i % (MIN_CLUSTERS - 1)}" for i in range(40)], 40)
    at = ClusterDesign.of([f"u{i % MIN_CLUSTERS}" for i in range(40)], 40)
    assert below.warnings() and "93%" in below.warnings()[0] and not at.warnings()


def test_batches_are_analysed_as_single_datasets() -> None:
    """A power simulation analyses many datasets at once: each row's result is the one-row result."""
    labels = np.repeat(np.arange(16), 3)  # 16 clusters: sampled sign patterns
    design = ClusterDesign.of(labels.tolist(), labels.size)
    rows = simulate(design, Components({"cluster": 0.5}, 0.5), 20, seed=3) + 0.2
    for procedure in (DifferenceProcedure(design), MeanProcedure(design)):
        batch = procedure.analyse(rows)
        for i, row in enumerate(rows):
            one = procedure.analyse(row)
            assert (one.p[0], one.low[0], one.high[0]) == pytest.approx((batch.p[i], batch.low[i], batch.high[i]))


def test_every_procedure_moves_with_the_data() -> None:
    """Shift-equivariance, which the power curve rests on."""
    rng = np.random.default_rng(8)
    personas, tasks = rng.integers(0, 8, 50), rng.integers(0, 10, 50)
    designs = [
        ClusterDesign(50),
        ClusterDesign.of(personas.tolist(), 50),
        ClusterDesign.of({"persona": personas.tolist(), "task": tasks.tolist()}, 50),
    ]
    x = rng.normal(size=(5, 50))
    for design in designs:
        for procedure in (DifferenceProcedure(design), MeanProcedure(design)):
            a, b = procedure.analyse(x), procedure.analyse(x + 0.7)
            assert b.low == pytest.approx(a.low + 0.7) and b.high == pytest.approx(a.high + 0.7)


def test_power_from_the_null_intervals_is_the_share_of_shifted_datasets_declared() -> None:
    labels = np.repeat(np.arange(10), 5)
    design = ClusterDesign.of(labels.tolist(), labels.size)
    procedure = DifferenceProcedure(design)
    components = Components({"cluster": 0.2}, 0.8)
    curve = PowerCurve.simulate(procedure, components, 400, seed=2)
    shifted = procedure.analyse(simulate(design, components, 400, seed=2) + 0.5)
    assert curve.power(0.5)[0] == pytest.approx(np.mean(shifted.p < 0.05))
    detectable = curve.detectable(0.8)
    assert detectable is not None and curve.power(detectable * 1.0001)[0] >= 0.8 > curve.power(detectable * 0.98)[0]


def test_cr2_on_equal_clusters_is_the_t_interval_of_the_cluster_means() -> None:
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(7), 6)
    x = rng.normal(size=7)[labels] + rng.normal(size=labels.size)
    means = x.reshape(7, 6).mean(axis=1)
    theirs = stats.ttest_1samp(means, 0.0).confidence_interval(0.95)
    result = mean_interval(x, clusters=labels.tolist())
    assert (result.low, result.high) == pytest.approx((theirs.low, theirs.high))
    assert result.df == pytest.approx(6)
    assert bell_mccaffrey_df(np.array([1.0, 2, 3, 20, 40])) < 4  # unequal clusters: fewer than G - 1
    _, se, df = cr2_rows(x, np.arange(x.size))  # every case its own cluster: s / sqrt(n), n - 1 df
    assert se[0] == pytest.approx(x.std(ddof=1) / np.sqrt(x.size)) and df == pytest.approx(x.size - 1)


def test_sampled_patterns_are_seeded_and_enumerated_when_few() -> None:
    assert sign_patterns(4, 100, 0).exact and sign_patterns(4, 100, 0).signs.shape == (16, 4)
    a, b = sign_patterns(20, 500, 1), sign_patterns(20, 500, 1)
    assert not a.exact and np.array_equal(a.signs, b.signs)
    result = sign_flip(np.array([[1.0, 2.0, -0.5, 3.0]]), np.ones(4), sign_patterns(4, 100, 0), 0.95)
    # |1 + 2 - 0.5 + 3| = 5.5: as extreme are the data, 1 + 2 + 0.5 + 3 = 6.5, and their two mirrors
    assert result.p[0] == pytest.approx(4 / 16)
