"""Meta-evaluation: PCA and MARD (PDR-Bench App. C), Pearson and Spearman, the PCA bootstrap interval,
and the per-criterion average (BESPOKE Table 3's Avg.)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from scipy import stats

from atelier.benchmarks.metrics.agreement import (
    CorrelationInput,
    JudgeAgreementInput,
    PairwiseJudgement,
    correlations,
    judge_agreement,
    mean_absolute_rating_deviation,
    pairwise_comparison_agreement,
    pearson,
    spearman,
)


def _pair(model_a: float, model_b: float, human_a: float, human_b: float, query_id: str = "q") -> PairwiseJudgement:
    return PairwiseJudgement(query_id=query_id, model_a=model_a, model_b=model_b, human_a=human_a, human_b=human_b)


def test_pca_counts_matching_preference_signs() -> None:
    pairs = [
        _pair(7, 5, 8, 6),  # both prefer A: agree
        _pair(6, 6, 7, 5),  # model ties, humans prefer A: disagree
        _pair(5, 7, 6, 8),  # both prefer B: agree
        _pair(4, 6, 7, 5),  # opposite: disagree
        _pair(8, 8, 3, 3),  # both tie: agree
    ]
    assert pairwise_comparison_agreement(pairs) == pytest.approx(3 / 5)


def test_mard_is_mean_absolute_deviation_over_both_reports_and_all_criteria() -> None:
    # Query q1 has 2 criteria and q2 has 1: the denominator is sum_q 2|C_q| = 6.
    pairs = [_pair(7, 5, 8, 6, "q1"), _pair(6, 6, 7, 5, "q1"), _pair(4, 6, 7, 5, "q2")]
    assert mean_absolute_rating_deviation(pairs) == pytest.approx((1 + 1 + 1 + 1 + 3 + 1) / 6)
    assert mean_absolute_rating_deviation([_pair(3, 4, 3, 4)]) == 0.0


def test_pca_and_mard_need_pairs() -> None:
    with pytest.raises(ValueError):
        pairwise_comparison_agreement([])
    with pytest.raises(ValueError):
        mean_absolute_rating_deviation([])
    with pytest.raises(ValidationError):
        JudgeAgreementInput(judgements=[])


def test_judge_agreement_correlates_all_scores() -> None:
    pairs = [_pair(7, 5, 8, 6), _pair(6, 6, 7, 5), _pair(5, 7, 6, 8)]
    result = judge_agreement(JudgeAgreementInput(judgements=pairs))
    model, human = [7, 5, 6, 6, 5, 7], [8, 6, 7, 5, 6, 8]
    assert result.n_pairs == 3
    assert result.pca == pytest.approx(2 / 3)
    assert result.pearson.statistic == pytest.approx(stats.pearsonr(model, human).statistic)
    assert result.spearman.statistic == pytest.approx(stats.spearmanr(model, human).statistic)


def test_pearson_and_spearman_known_values() -> None:
    x = [1, 2, 3, 4, 5]
    assert pearson(x, [2, 4, 6, 8, 10]).statistic == pytest.approx(1.0)
    assert pearson(x, [5, 4, 3, 2, 1]).statistic == pytest.approx(-1.0)
    cubes = [v**3 for v in x]
    assert spearman(x, cubes).statistic == pytest.approx(1.0)
    assert pearson(x, cubes).statistic < 0.99
    # Hand value: x = 1..4, y = (1, 3, 2, 4): r = 0.8.
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]).statistic == pytest.approx(0.8)


def test_undefined_correlations_are_none() -> None:
    assert pearson([1, 2, 3], [4, 4, 4]).statistic is None
    assert spearman([3], [1]).p_value is None
    with pytest.raises(ValueError, match="differ in length"):
        pearson([1, 2], [1])


def test_correlation_input_pairs_lists() -> None:
    result = correlations(CorrelationInput(x=[1, 2, 3], y=[1, 2, 4]))
    assert result.n == 3
    assert result.spearman.statistic == pytest.approx(1.0)
    with pytest.raises(ValidationError, match="paired"):
        CorrelationInput(x=[1, 2], y=[1])
    with pytest.raises(ValidationError):
        CorrelationInput(x=[1, float("nan")], y=[1, 2])


def test_criterion_agreement_over_a_run_with_three_systems() -> None:
    from atelier.benchmarks.metrics.agreement import LabelledScore, criterion_agreement, feedback_accuracy

    items = [
        LabelledScore(case_id=c, system=s, model=m, human=h)
        for c, s, m, h in [
            ("q1", "a", 8, 7),
            ("q1", "b", 5, 6),
            ("q1", "c", 5, 9),
            ("q2", "a", 3, 3),
            ("q2", "b", 4, 2),
            ("q3", "a", 6, 6),  # alone on its case: no pair, but counts for MARD and correlations
        ]
    ]
    result = criterion_agreement(items)
    # pairs: q1 a-b (+,+) agree; a-c (+,-) disagree; b-c (0,-) disagree; q2 a-b (-,+) disagree
    assert result.n_pairs == 4 and result.pca == pytest.approx(1 / 4)
    assert result.mard == pytest.approx((1 + 1 + 4 + 0 + 2 + 0) / 6)
    assert result.n == 6 and result.pearson.statistic is not None
    assert criterion_agreement(items[-1:]).pca is None
    assert feedback_accuracy([True, False, True, True]) == 0.75 and feedback_accuracy([]) is None


def test_undefined_p_values_are_none_never_nan() -> None:
    # scipy's Spearman on two pairs gives a NaN p-value; it must come out as None (null in JSON)
    result = spearman([4, 2], [5, 1])
    assert result.statistic == pytest.approx(1.0) and result.p_value is None
    assert pearson([4, 2], [5, 1]).p_value == pytest.approx(1.0)


def test_pca_interval_is_the_seeded_bootstrap_of_the_pair_outcomes() -> None:
    from atelier.benchmarks.metrics.agreement import LabelledScore, criterion_agreement
    from atelier.benchmarks.metrics.statistics import percentile_bootstrap

    # q1..q3 agree, q4 disagrees: outcomes (0, 1, 1, 1) in any order
    items = [
        LabelledScore(case_id=f"q{i}", system=s, model=m, human=h)
        for i, rows in enumerate(
            [
                [("a", 5, 4), ("b", 3, 2)],
                [("a", 1, 1), ("b", 2, 3)],
                [("a", 4, 5), ("b", 2, 1)],
                [("a", 4, 1), ("b", 2, 3)],
            ],
            start=1,
        )
        for s, m, h in rows
    ]
    result = criterion_agreement(items, confidence=0.9, n_resamples=2000, seed=7)
    assert result.pca == 0.75
    expected = percentile_bootstrap([0, 1, 1, 1], 0.9, 2000, 7)  # a proportion: kept within [0, 1]
    assert (result.pca_ci.low, result.pca_ci.high) == (expected.low, expected.high)
    assert (result.pca_ci.confidence, result.pca_ci.n_resamples, result.pca_ci.seed) == (0.9, 2000, 7)
    assert criterion_agreement(list(reversed(items)), 0.9, 2000, 7).pca_ci == result.pca_ci  # order-free
    single = criterion_agreement(items[:1])
    assert single.pca is None and (single.pca_ci.low, single.pca_ci.high) == (None, None)


def test_average_is_the_mean_of_per_criterion_figures_never_pooled() -> None:
    """BESPOKE Table 3's Avg.: two criteria on different scales, +1 and -1, average 0."""
    from atelier.benchmarks.metrics.agreement import LabelledScore, average_agreement, criterion_agreement

    rating = criterion_agreement(
        [LabelledScore(case_id=f"q{i // 2}", system="ab"[i % 2], model=v, human=v) for i, v in enumerate([1, 2, 3, 4])]
    )
    recall = criterion_agreement(
        [
            LabelledScore(case_id=f"q{i // 2}", system="ab"[i % 2], model=m, human=h)
            for i, (m, h) in enumerate([(0.1, 0.4), (0.2, 0.3), (0.3, 0.2), (0.4, 0.1)])
        ]
    )
    constant = criterion_agreement(
        [LabelledScore(case_id="q0", system=s, model=m, human=3) for s, m in (("a", 1), ("b", 2))]
    )
    assert (rating.pearson.statistic, recall.pearson.statistic) == (pytest.approx(1.0), pytest.approx(-1.0))
    average = average_agreement({"rating": rating, "recall": recall})
    assert average.pearson == pytest.approx(0.0) and average.spearman == pytest.approx(0.0)
    assert average.pca == 0.5 and average.criteria == ["rating", "recall"] and average.undefined == {}
    with_constant = average_agreement({"rating": rating, "recall": recall, "flat": constant})
    # the constant criterion defines no correlation: left out of that mean, and named, not counted as 0
    assert with_constant.pearson == pytest.approx(0.0) and with_constant.undefined == {
        "pearson": ["flat"],
        "spearman": ["flat"],
    }
    assert with_constant.pca == pytest.approx((1 + 0 + 0) / 3)  # flat: the judge prefers b, the labels tie


def test_criterion_agreement_is_the_same_for_the_same_labels_in_any_order() -> None:
    """A label page and a CSV sheet hand meta-eval the same labels in different orders: the figures
    are the same to the last bit (a correlation of zero read +2.4e-17 from one and -2.4e-17 from the
    other, and the report's average differed)."""
    import random

    from atelier.benchmarks.metrics.agreement import LabelledScore, average_agreement, criterion_agreement

    rng = random.Random(48)
    differed = 0
    for _ in range(60):
        items = [
            LabelledScore(case_id=f"q{c}", system=s, model=rng.randint(1, 5), human=rng.randint(1, 5))
            for c in range(rng.randint(2, 9))
            for s in ("A", "B", "C")[: rng.randint(2, 3)]
        ]
        result = criterion_agreement(items, n_resamples=200)
        for _ in range(5):
            shuffled = rng.sample(items, len(items))
            again = criterion_agreement(shuffled, n_resamples=200)
            assert again.model_dump() == result.model_dump()
            average = average_agreement({"x": again, "y": result})
            assert average.pearson in (None, result.pearson.statistic)
            differed += shuffled != items
    assert differed > 250  # the orders really were other orders
