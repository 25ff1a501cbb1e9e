"""Clustered intervals and paired tests (issue 45): cases that share a persona, a task or a
conversation are not independent, and the statistics resample their clusters when told them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy import stats

from atelier.benchmarks.metrics.clusters import (
    ClusterDesign,
    clustered_variance,
    design_effect,
    multiway_t,
    standard_error,
    t_detectable,
    z_sum,
)
from atelier.benchmarks.metrics.statistics import (
    CASE_METHOD,
    BootstrapInput,
    PairedTestInput,
    bootstrap_ci,
    mean_interval,
    paired_test,
)

GROUPS, PER_GROUP, ICC = 25, 10, 0.7


def _null_dataset(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Two systems with no average difference, whose difference varies by cluster (25 clusters of 10,
    within-cluster correlation of the differences 0.7)."""
    members = np.repeat(np.arange(GROUPS), PER_GROUP)
    effect = rng.normal(0, np.sqrt(ICC), GROUPS)[members]
    noise = rng.normal(0, np.sqrt(1 - ICC), members.size)
    b = rng.uniform(size=members.size)
    return b + effect + noise, b, [f"user{g}" for g in members]


def test_with_clusters_a_true_null_is_rejected_about_5_percent_of_the_time_and_without_far_more() -> None:
    """The acceptance figure: 60 null datasets with strong cluster effects."""
    rng = np.random.default_rng(2024)
    clustered = naive = 0
    for k in range(60):
        a, b, labels = _null_dataset(rng)
        clustered += paired_test(a, b, n_resamples=2000, seed=k, clusters=labels).permutation_p < 0.05
        naive += paired_test(a, b, n_resamples=2000, seed=k).permutation_p < 0.05
    assert clustered <= 6, f"clustered test rejected {clustered}/60 true nulls"
    assert naive >= 15, f"the naive test rejected only {naive}/60: the simulation has no cluster effect"


def test_clustered_interval_covers_zero_under_the_null_where_the_naive_one_does_not() -> None:
    rng = np.random.default_rng(5)
    clustered = naive = 0
    for k in range(40):
        a, b, labels = _null_dataset(rng)
        with_clusters = paired_test(a, b, n_resamples=1000, seed=k, clusters=labels)
        without = paired_test(a, b, n_resamples=1000, seed=k)
        clustered += not (with_clusters.ci_low <= 0 <= with_clusters.ci_high)
        naive += not (without.ci_low <= 0 <= without.ci_high)
    assert clustered <= 4 and naive >= 10


def test_mde_is_the_power_formula_with_the_effective_n() -> None:
    """mde within 15% of (z_0.975 + z_0.8) x sd_diff / sqrt(n_eff), n_eff = n / (1 + (m - 1) ICC),
    the ICC estimated by one-way ANOVA, on every one of 60 datasets."""
    rng = np.random.default_rng(7)
    for k in range(60):
        a, b, labels = _null_dataset(rng)
        d = (a - b).reshape(GROUPS, PER_GROUP)
        between = PER_GROUP * d.mean(axis=1).var(ddof=1)
        within = d.var(axis=1, ddof=1).mean()
        icc = max(0.0, (between - within) / (between + (PER_GROUP - 1) * within))
        n_eff = d.size / (1 + (PER_GROUP - 1) * icc)
        formula = z_sum() * d.std(ddof=1) / np.sqrt(n_eff)
        mde = paired_test(a, b, n_resamples=200, seed=k, clusters=labels).mde
        assert mde == pytest.approx(formula, rel=0.15)


def test_mde_without_clusters_is_the_power_of_the_sign_flip_test() -> None:
    """Independent cases: the sign-flip test over 50 cases has about the t test's power, so its mde is
    the noncentral t's (within the simulation's error)."""
    d = np.random.default_rng(1).normal(size=50)
    result = paired_test(d, np.zeros(50), n_resamples=2000)
    assert result.mde == pytest.approx(t_detectable(d.std(ddof=1) / np.sqrt(50), 49), rel=0.08)
    assert result.design_effect == 1.0 and result.ci_method.startswith("sign-flip test over cases")
    assert result.n_clusters == {}


def _crossed_design() -> tuple[np.ndarray, np.ndarray]:
    """PDR-Bench's shape: 25 personas x 50 tasks, 250 cases, each persona 10 tasks, each task 5 personas."""
    pairs = [(p, (2 * p + 5 * j) % 50) for p in range(25) for j in range(10)]
    return np.array([p for p, _ in pairs]), np.array([t for _, t in pairs])


def test_crossed_clusters_hold_the_level_where_either_one_way_clustering_does_not() -> None:
    personas, tasks = _crossed_design()
    rng = np.random.default_rng(11)
    rejected = {"both": 0, "persona": 0, "none": 0}
    for k in range(40):
        d = (
            rng.normal(0, np.sqrt(0.4), 25)[personas]
            + rng.normal(0, np.sqrt(0.4), 50)[tasks]
            + rng.normal(0, np.sqrt(0.2), personas.size)
        )
        b = rng.uniform(size=d.size)
        crossed = {"persona": [f"p{p}" for p in personas], "task": [f"t{t}" for t in tasks]}
        rejected["both"] += paired_test(b + d, b, n_resamples=1000, seed=k, clusters=crossed).permutation_p < 0.05
        rejected["persona"] += (
            paired_test(b + d, b, n_resamples=1000, seed=k, clusters=crossed["persona"]).permutation_p < 0.05
        )
        rejected["none"] += paired_test(b + d, b, n_resamples=1000, seed=k).permutation_p < 0.05
    assert rejected["both"] <= 4, rejected
    assert rejected["none"] >= 10, rejected
    assert rejected["persona"] > rejected["both"], rejected


def test_crossed_result_names_both_dimensions_and_has_no_rank_test() -> None:
    personas, tasks = _crossed_design()
    d = np.random.default_rng(3).normal(size=personas.size)
    result = paired_test(
        d, np.zeros_like(d), n_resamples=500, clusters={"persona": personas.tolist(), "task": tasks.tolist()}
    )
    assert result.n_clusters == {"persona": 25, "task": 50}
    assert "multiway cluster-robust" in result.ci_method and "persona (25) x task (50)" in result.ci_method
    assert result.wilcoxon_p is None and 0 < result.permutation_p <= 1
    assert result.ci_low < d.mean() < result.ci_high


def test_one_way_clustered_variance_is_the_variance_of_cluster_means_over_g_when_balanced() -> None:
    x = np.random.default_rng(2).normal(size=60)
    codes = np.repeat(np.arange(12), 5)
    design = ClusterDesign.of(codes.tolist(), 60)
    means = x.reshape(12, 5).mean(axis=1)
    assert clustered_variance(x, design) == pytest.approx(means.var(ddof=1) / 12)
    assert design_effect(x, design) == pytest.approx(means.var(ddof=1) / 12 / (x.var(ddof=1) / 60))


def test_two_way_clustered_variance_is_rows_plus_columns_minus_cells_on_a_full_crossing() -> None:
    x = np.random.default_rng(4).normal(size=(8, 12)) + np.arange(8)[:, None] * 0.3
    rows, cols = np.indices(x.shape)
    design = ClusterDesign.of({"row": rows.ravel().tolist(), "col": cols.ravel().tolist()}, x.size)
    expected = x.mean(axis=1).var(ddof=1) / 8 + x.mean(axis=0).var(ddof=1) / 12 - x.var(ddof=1) / x.size
    assert clustered_variance(x.ravel(), design) == pytest.approx(expected)


def test_the_design_drops_what_carries_no_information_and_says_so() -> None:
    n = 12
    user = [f"u{i // 4}" for i in range(n)]  # 3 users
    design = ClusterDesign.of(
        {
            "user": user,
            "same": [f"s{i // 4}" for i in range(n)],  # the same groups as user
            "session": [f"x{i // 2}" for i in range(n)],  # nested in user
            "benchmark": ["pdr"] * n,  # one level
            "case": [str(i) for i in range(n)],  # every value its own
        },
        n,
    )
    assert design.names == ("user",)
    notes = " | ".join(design.notes)
    for said in ("same groups as user", "session: nested in user", "benchmark: one cluster", "case: every value"):
        assert said in notes
    assert design.warnings() and "user has 3" in design.warnings()[0]


def test_one_cluster_falls_back_to_cases_and_says_the_figures_hold_for_it_alone() -> None:
    values = [0.1, 0.4, 0.3, 0.8]
    result = mean_interval(values, n_resamples=500, clusters=["u1"] * 4)
    assert result.ci_method == CASE_METHOD and result.n_clusters == {}
    assert any("one cluster only" in note for note in result.cluster_notes)
    assert (result.low, result.high) == bootstrap_ci(values, n_resamples=500)


def test_few_clusters_are_said_in_the_result() -> None:
    result = mean_interval([0.1, 0.2, 0.5, 0.9, 0.4, 0.3], n_resamples=200, clusters=["a", "a", "b", "b", "c", "c"])
    assert result.n_clusters == {"cluster": 3}
    assert any("few clusters" in note for note in result.cluster_notes)


def test_clustered_interval_is_wider_than_the_naive_one_with_strong_clusters() -> None:
    a, b, labels = _null_dataset(np.random.default_rng(9))
    naive = mean_interval(a - b, n_resamples=1000)
    clustered = mean_interval(a - b, n_resamples=1000, clusters=labels)
    assert clustered.high - clustered.low > 2 * (naive.high - naive.low)
    assert clustered.design_effect > 3


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=30),
    groups=st.integers(1, 6),
    seed=st.integers(0, 5),
)
def test_clustered_figures_are_finite_and_the_interval_holds_the_mean(values, groups, seed) -> None:
    labels = [f"g{i % groups}" for i in range(len(values))]
    result = mean_interval(values, n_resamples=200, seed=seed, clusters=labels)
    assert result.low is not None and result.high is not None
    assert result.low - 1e-9 <= result.mean <= result.high + 1e-9
    assert result.mde is None or result.mde >= 0
    test = paired_test(values, [0.0] * len(values), n_resamples=200, seed=seed, clusters=labels)
    assert 0 <= test.permutation_p <= 1


def test_crossed_interval_and_p_are_the_t_on_the_fewest_clusters() -> None:
    personas, tasks = _crossed_design()
    d = np.random.default_rng(8).normal(0.1, 1, size=personas.size)
    crossed = {"persona": personas.tolist(), "task": tasks.tolist()}
    design = ClusterDesign.of(crossed, d.size)
    se = standard_error(d, design)
    t = stats.t.ppf(0.975, 24)  # 25 personas, the fewer clusters
    low, high, p = multiway_t(d, design, 0.95)
    assert (low, high) == pytest.approx((d.mean() - t * se, d.mean() + t * se))
    assert p == pytest.approx(2 * stats.t.sf(abs(d.mean()) / se, 24))
    result = paired_test(d, np.zeros_like(d), clusters=crossed)
    assert (result.ci_low, result.ci_high, result.permutation_p) == pytest.approx((low, high, p))
    assert bootstrap_ci(d, clusters=crossed) == pytest.approx((low, high))


def test_labels_must_number_the_values() -> None:
    with pytest.raises(ValidationError, match="clusters: 2 labels for 3 values"):
        PairedTestInput(a=[1, 2, 3], b=[1, 1, 1], clusters=["u1", "u2"])
    with pytest.raises(ValidationError, match="clusters.task: 2 labels for 3 values"):
        BootstrapInput(values=[1, 2, 3], clusters={"persona": ["a", "b", "c"], "task": ["x", "y"]})
    with pytest.raises(ValueError, match="clusters 'cluster': 1 labels for 2 values"):
        paired_test([1, 2], [0, 0], clusters=["a"])


def test_metric_cli_prints_the_clustered_figures_and_refuses_bad_labels_in_one_line(tmp_path) -> None:
    a, b, labels = _null_dataset(np.random.default_rng(3))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"a": a.tolist(), "b": b.tolist(), "clusters": labels, "n_resamples": 500}))
    done = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "metric", "paired_test", "--input", str(good)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["n_clusters"] == {"cluster": 25}
    assert printed["ci_method"].startswith("sign-flip test over clusters: cluster (25)")
    assert printed["design_effect"] > 1 and printed["mde"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"values": [1, 2, 3], "clusters": {"persona": ["a", "b"]}}))
    done = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "metric", "bootstrap_ci", "--input", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {bad}: clusters.persona: 2 labels for 3 values (one label per value)"
    ]
