"""BESPOKE 1-5 -> 0-100 scaling and gold-information recall; LaMP-QA aspect score (Algorithm 1)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from atelier.benchmarks.metrics.bespoke import BespokeInput, bespoke_scores, gold_information_recall, likert_to_percent
from atelier.benchmarks.metrics.lampqa import (
    LampQAInput,
    check_direct_level,
    lampqa_score,
    lampqa_scores,
    pairwise_outcome,
)


@pytest.mark.parametrize(("likert", "percent"), [(1, 20.0), (3, 60.0), (5, 100.0)])
def test_likert_is_multiplied_by_twenty(likert: int, percent: float) -> None:
    assert likert_to_percent(likert) == percent


@pytest.mark.parametrize("likert", [0, 6])
def test_likert_outside_one_to_five_raises(likert: int) -> None:
    with pytest.raises(ValueError, match="from 1 to 5"):
        likert_to_percent(likert)


def test_bespoke_scores_follow_table_4_layout() -> None:
    judged = BespokeInput.model_validate(
        {
            "ratings": {"need_alignment": 2, "content_depth": 3, "tone": 5, "explanation_style": 4},
            "gold_information": [
                {"present": True},
                {"present": False},
                {"present": False},
                {"present": True},
                {"present": False},
            ],
        }
    )
    result = bespoke_scores(judged)
    assert result.criteria == {"need_alignment": 40.0, "content_depth": 60.0, "tone": 100.0, "explanation_style": 80.0}
    assert result.personalization == pytest.approx(70.0)
    assert result.recall == pytest.approx(0.4)
    # "Avg." = mean of the four scaled criteria and recall in percent.
    assert result.average == pytest.approx((40 + 60 + 100 + 80 + 40) / 5)


def test_bespoke_without_gold_information_has_no_recall_or_average() -> None:
    result = bespoke_scores(
        BespokeInput.model_validate(
            {"ratings": {"need_alignment": 1, "content_depth": 1, "tone": 1, "explanation_style": 1}}
        )
    )
    assert result.personalization == 20.0
    assert result.recall is None
    assert result.average is None


def test_bespoke_ratings_must_be_integers_from_one_to_five() -> None:
    ratings = {"need_alignment": 3.5, "content_depth": 3, "tone": 3, "explanation_style": 3}
    with pytest.raises(ValidationError) as caught:
        BespokeInput.model_validate({"ratings": ratings})
    assert caught.value.errors()[0]["loc"] == ("ratings", "need_alignment")
    with pytest.raises(ValidationError):
        BespokeInput.model_validate({"ratings": {**ratings, "need_alignment": 0}})
    with pytest.raises(ValidationError, match="explanation_style"):
        BespokeInput.model_validate({"ratings": {"need_alignment": 3, "content_depth": 3, "tone": 3}})


def test_gold_information_recall() -> None:
    assert gold_information_recall([True, True, False]) == pytest.approx(2 / 3)
    assert gold_information_recall([]) == 0.0  # BESPOKE's official code: an empty gold list scores 0


def test_an_empty_gold_list_scores_zero_recall_and_is_marked() -> None:
    ratings = {"need_alignment": 5, "content_depth": 5, "tone": 5, "explanation_style": 5}
    result = bespoke_scores(BespokeInput.model_validate({"ratings": ratings, "gold_information": []}))
    assert result.recall == 0.0 and result.empty_gold
    assert result.average == pytest.approx(400 / 5)


def test_lampqa_direct_levels() -> None:
    assert check_direct_level(0.75) == 0.75
    with pytest.raises(ValueError, match="one of 0.0, 0.25"):
        check_direct_level(0.6)


@pytest.mark.parametrize(
    ("first", "swapped", "score", "flipped"),
    [
        ("response_1", "response_2", 1.0, False),  # the candidate wins in both orders
        ("response_2", "response_1", 0.0, False),  # the baseline wins in both orders
        ("response_1", "response_1", 0.5, True),  # the judge always picks the first position
        ("response_2", "response_2", 0.5, True),  # ... or always the second
        ("tie", "tie", 0.5, False),
        ("tie", "response_2", 0.75, True),
    ],
)
def test_pairwise_outcome_in_both_orders(first, swapped, score, flipped) -> None:
    outcome = pairwise_outcome(first, swapped)
    assert outcome.score == score and outcome.flipped is flipped


def test_lampqa_score_normalises_by_two_and_averages() -> None:
    assert lampqa_score([2, 1, 0, 2]) == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert lampqa_score([2, 2]) == 1.0
    assert lampqa_score([0]) == 0.0
    result = lampqa_scores(LampQAInput.model_validate({"aspects": [{"aspect": "a", "score": 1}, {"score": 2}]}))
    assert result.score == pytest.approx(0.75)
    assert result.normalized == [0.5, 1.0]


def test_lampqa_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="at least one"):
        lampqa_score([])
    with pytest.raises(ValueError, match=r"aspect #2 score must be in \[0, 2\]"):
        lampqa_score([1, 2.5])
    with pytest.raises(ValidationError):
        LampQAInput.model_validate({"aspects": []})
    with pytest.raises(ValidationError):
        LampQAInput.model_validate({"aspects": [{"score": -1}]})
