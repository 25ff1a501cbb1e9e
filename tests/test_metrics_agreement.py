"""Meta-evaluation: PCA and MARD (PDR-Bench App. C), Pearson and Spearman."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from scipy import stats

from benchmarks.metrics.agreement import (
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
    from benchmarks.metrics.agreement import LabelledScore, criterion_agreement, feedback_accuracy

    items = [LabelledScore(case_id=c, system=s, model=m, human=h) for c, s, m, h in [
        ("q1", "a", 8, 7), ("q1", "b", 5, 6), ("q1", "c", 5, 9),
        ("q2", "a", 3, 3), ("q2", "b", 4, 2),
        ("q3", "a", 6, 6),  # alone on its case: no pair, but counts for MARD and correlations
    ]]
    result = criterion_agreement(items)
    # pairs: q1 a-b (+,+) agree; a-c (+,-) disagree; b-c (0,-) disagree; q2 a-b (-,+) disagree
    assert result.n_pairs == 4 and result.pca == pytest.approx(1 / 4)
    assert result.mard == pytest.approx((1 + 1 + 4 + 0 + 2 + 0) / 6)
    assert result.n == 6 and result.pearson.statistic is not None
    assert criterion_agreement(items[-1:]).pca is None
    assert feedback_accuracy([True, False, True, True]) == 0.75 and feedback_accuracy([]) is None
