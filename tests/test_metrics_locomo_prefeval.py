"""LoCoMo F1 (LoCoMo's own normalisation and category rules) and PrefEval error types, by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from atelier.benchmarks.metrics.locomo import locomo_f1, normalize_answer, refuses, token_f1
from atelier.benchmarks.metrics.prefeval import PreferenceChecks, PrefEvalInput, preference_verdict, prefeval_scores


def test_normalisation_drops_commas_punctuation_articles_and_and() -> None:
    assert normalize_answer("The cat, and a Dog!") == "cat dog"


def test_token_f1_stems_and_counts_overlap() -> None:
    # "running shoes" vs "run shoe": both stem to run + shoe
    assert token_f1("Running shoes", "run shoe") == 1.0
    # 1 common of 2 predicted and 4 gold tokens: P 1/2, R 1/4 -> 2*(1/8)/(3/4) = 1/3
    assert token_f1("blue car", "red bicycle green car") == pytest.approx(1 / 3)
    assert token_f1("nothing", "else") == 0.0


def test_category_rules() -> None:
    assert locomo_f1("Paris", "Paris; or maybe Lyon", 3) == 1.0  # category 3 keeps the part before ';'
    assert locomo_f1("Paris", "Paris; or maybe Lyon", 2) == pytest.approx(2 * 1 * (1 / 4) / (1 + 1 / 4))
    # category 1: mean over gold parts of the best F1 over predicted parts
    assert locomo_f1("hiking, chess", "chess, painting, hiking", 1) == pytest.approx(2 / 3)
    assert locomo_f1("That was not mentioned.", "anything", 5) == 1.0
    assert locomo_f1("No information available about it", "", 5) == 1.0
    assert locomo_f1("She moved to Boston.", "", 5) == 0.0
    assert refuses("NOT MENTIONED in the chat")
    with pytest.raises(ValueError, match="1 to 5"):
        locomo_f1("a", "b", 6)


@pytest.mark.parametrize(
    ("checks", "follows", "error"),
    [
        (dict(acknowledges=True, violates=False, helpful=True), True, None),
        (dict(acknowledges=False, violates=False, helpful=True), True, None),  # unaware but harmless
        (dict(acknowledges=True, hallucinates=True, violates=False, helpful=True), True, None),  # as the official code
        (dict(acknowledges=True, violates=True, helpful=True), False, "inconsistent"),
        (dict(acknowledges=True, hallucinates=True, violates=True, helpful=True), False, "hallucinated_violation"),
        (dict(acknowledges=False, violates=True, helpful=True), False, "unaware_violation"),
        (dict(acknowledges=True, violates=True, helpful=False), False, "unhelpful"),  # unhelpful wins
    ],
)
def test_prefeval_error_types(checks, follows, error) -> None:
    verdict = preference_verdict(PreferenceChecks(**checks))
    assert (verdict.follows, verdict.error) == (follows, error)


def test_prefeval_summary_and_validation() -> None:
    result = prefeval_scores(
        PrefEvalInput.model_validate(
            {
                "items": [
                    {"acknowledges": True, "violates": False, "helpful": True},
                    {"acknowledges": False, "violates": True, "helpful": True},
                    {"acknowledges": False, "violates": False, "helpful": False},
                    {"acknowledges": True, "violates": False, "helpful": True},
                ]
            }
        )
    )
    assert result.accuracy == 0.5 and result.errors["unaware_violation"] == 1 and result.errors["unhelpful"] == 1
    assert result.acknowledgement_rate == 0.5 and result.violation_rate == 0.25
    with pytest.raises(ValidationError, match="needs acknowledges=true"):
        PreferenceChecks(acknowledges=False, hallucinates=True, violates=False, helpful=True)
