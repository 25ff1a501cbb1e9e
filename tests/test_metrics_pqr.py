"""PDR-Bench PQR: two-level weighted P and Q, R from FA and CC, overall, weight validation, aggregation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from atelier.benchmarks.metrics.pqr import (
    ClaimCheck,
    DimensionJudgement,
    PQRInput,
    aggregate_pqr,
    factual_reliability,
    pqr_scores,
    reliability_from_claims,
)
from atelier.benchmarks.metrics.registry import EXAMPLES_DIR


def _dimension(weight: float, *criteria: tuple[float, float]) -> dict:
    return {"weight": weight, "criteria": [{"weight": w, "score": s} for w, s in criteria]}


def _judged(claims: list[dict] | None = None, **overrides: dict) -> dict:
    payload = {
        "personalization": {
            "GOAL": _dimension(0.4, (0.5, 8), (0.5, 6)),  # S = 7
            "CONT": _dimension(0.3, (1.0, 5)),  # S = 5
            "PRES": _dimension(0.2, (0.25, 4), (0.75, 8)),  # S = 7
            "ACTI": _dimension(0.1, (1.0, 10)),  # S = 10
        },
        "quality": {
            "DEIN": _dimension(0.5, (0.2, 5), (0.8, 10)),  # S = 9
            "LOGC": _dimension(0.25, (1.0, 6)),  # S = 6
            "CLAR": _dimension(0.25, (1.0, 2)),  # S = 2
        },
        "claims": claims if claims is not None else [],
    }
    payload.update(overrides)
    return payload


def test_two_level_weighted_scores_match_hand_computation() -> None:
    claims = [
        {"claim": "a", "source": "https://a", "supported": True},
        {"claim": "b", "source": "https://b", "supported": False},
        {"claim": "c", "source": "[3]", "supported": True},
        {"claim": "d", "source": "https://d", "supported": None},
        {"claim": "e"},
    ]
    result = pqr_scores(PQRInput.model_validate(_judged(claims)))
    assert result.personalization.dimensions == pytest.approx({"GOAL": 7, "CONT": 5, "PRES": 7, "ACTI": 10})
    # 0.4*7 + 0.3*5 + 0.2*7 + 0.1*10 = 2.8 + 1.5 + 1.4 + 1.0
    assert result.personalization.score == pytest.approx(6.7)
    # 0.5*9 + 0.25*6 + 0.25*2
    assert result.quality.score == pytest.approx(6.5)
    # 4 of 5 claims cited, 2 of the 4 supported (unknown counts as unsupported).
    assert result.reliability.factual_accuracy == pytest.approx(5.0)
    assert result.reliability.citation_coverage == pytest.approx(8.0)
    assert result.reliability.score == pytest.approx(6.5)
    assert result.overall == pytest.approx((6.7 + 6.5 + 6.5) / 3)


def test_bundled_example_scores() -> None:
    payload = json.loads((EXAMPLES_DIR / "pqr.json").read_text())
    result = pqr_scores(PQRInput.model_validate(payload))
    assert result.personalization.score == pytest.approx(6.4)
    assert result.quality.score == pytest.approx(6.75)
    assert result.reliability.score == pytest.approx((20 / 3 + 7.5) / 2)
    assert result.overall == pytest.approx((6.4 + 6.75 + (20 / 3 + 7.5) / 2) / 3)


# Where the paper is silent (weights off 1, unscored criteria) the values below are DeepResearch Bench's
# utils/score_calculator.py::calculate_weighted_scores (github.com/Ayanami0730/deep_research_bench), worked
# by hand from reading that function: per dimension sum(w_c s_c) / sum(w_c) over the scored criteria (0 when
# none is scored), then sum(w_d * S_d) with the dimension weights as given.


def test_dimension_weights_not_summing_to_one_are_used_as_given() -> None:
    payload = _judged()
    payload["personalization"]["GOAL"]["weight"] = 0.5  # 0.5 + 0.3 + 0.2 + 0.1 = 1.1
    p = pqr_scores(PQRInput.model_validate(payload)).personalization
    # total_target_score += dim_target_avg * dim_weight, never divided by the weights' sum
    assert p.score == pytest.approx(0.5 * 7 + 0.3 * 5 + 0.2 * 7 + 0.1 * 10)  # 7.4, not 7.4 / 1.1
    assert p.weight_sum == pytest.approx(1.1) and p.coverage == pytest.approx(1.0)


def test_sub_criterion_weights_not_summing_to_one_are_divided_by_their_sum() -> None:
    payload = _judged()
    payload["quality"]["DEIN"]["criteria"][0]["weight"] = 0.1  # 0.1 + 0.8 = 0.9
    q = pqr_scores(PQRInput.model_validate(payload)).quality
    # dim_target_weighted_sum / dim_total_weight
    assert q.dimensions["DEIN"] == pytest.approx((0.1 * 5 + 0.8 * 10) / 0.9)  # 9.444...
    assert q.score == pytest.approx(0.5 * (8.5 / 0.9) + 0.25 * 6 + 0.25 * 2)  # 6.7222...


def test_two_decimal_thirds_give_the_mean_within_a_dimension_and_scale_an_axis() -> None:
    dimension = DimensionJudgement.model_validate(_dimension(0.33, (0.33, 3), (0.33, 6), (0.33, 9)))
    assert dimension.score == pytest.approx(6.0) and dimension.weight_sum == pytest.approx(0.99)
    payload = _judged(quality={"insight": _dimension(0.33, (0.33, 3), (0.33, 6), (0.33, 9))}, quality_source="shipped")
    assert pqr_scores(PQRInput.model_validate(payload)).quality.score == pytest.approx(0.33 * 6)  # 1.98


@pytest.mark.parametrize("weight", [-0.1, float("nan"), float("inf")])
def test_negative_or_non_finite_weights_are_rejected(weight: float) -> None:
    with pytest.raises(ValidationError):
        DimensionJudgement.model_validate(_dimension(weight, (1.0, 5)))
    with pytest.raises(ValidationError):
        DimensionJudgement.model_validate(_dimension(1.0, (weight, 5)))


def test_missing_and_unknown_dimensions_are_errors() -> None:
    payload = _judged()
    del payload["personalization"]["ACTI"]
    with pytest.raises(ValidationError, match="missing ACTI"):
        PQRInput.model_validate(payload)
    payload = _judged()
    payload["quality"]["GOAL"] = _dimension(0.0, (1.0, 5))
    with pytest.raises(ValidationError, match="unknown GOAL") as caught:
        PQRInput.model_validate(payload)
    assert caught.value.errors()[0]["loc"][0] == "quality"


def test_shipped_quality_criteria_keep_their_own_dimensions() -> None:
    payload = _judged(
        quality={"insight": _dimension(0.6, (1.0, 5)), "readability": _dimension(0.4, (0.5, 10), (0.5, 6))},
        quality_source="shipped",
    )
    result = pqr_scores(PQRInput.model_validate(payload))
    assert result.quality.dimensions == {"insight": 5.0, "readability": 8.0}
    assert result.quality.score == pytest.approx(0.6 * 5 + 0.4 * 8)


def test_skipped_criteria_leave_their_dimension_and_an_unscored_dimension_scores_zero() -> None:
    payload = _judged()
    # GOAL: criteria (0.5, 8) and (0.5, unscored) -> S_GOAL = 0.5 * 8 / 0.5 = 8, coverage 0.5
    payload["personalization"]["GOAL"] = {
        "weight": 0.4,
        "criteria": [{"weight": 0.5, "score": 8}, {"weight": 0.5, "score": None}],
    }
    # ACTI: its only criterion unscored -> dim_total_weight 0 -> S_ACTI = 0, and ACTI keeps its weight
    payload["personalization"]["ACTI"] = {"weight": 0.1, "criteria": [{"weight": 1.0, "score": None}]}
    result = pqr_scores(PQRInput.model_validate(payload))
    p = result.personalization
    assert p.dimensions == {"GOAL": 8.0, "CONT": 5.0, "PRES": 7.0, "ACTI": 0.0}
    assert p.score == pytest.approx(0.4 * 8 + 0.3 * 5 + 0.2 * 7 + 0.1 * 0)  # 6.1, not renormalised over 0.9
    assert p.coverage == pytest.approx(0.4 * 0.5 + 0.3 + 0.2)
    assert p.skipped_criteria == 2 and p.unscored_dimensions == ["ACTI"]
    # with nothing skipped the same code is exactly Eq. 1
    full = pqr_scores(PQRInput.model_validate(_judged()))
    assert full.personalization.score == pytest.approx(6.7) and full.personalization.coverage == pytest.approx(1.0)
    assert full.personalization.unscored_dimensions == []


def test_exact_duplicate_triplets_count_once_but_the_same_claim_with_two_sources_counts_twice() -> None:
    claims = [
        ClaimCheck(claim="Oslo is in Norway.", source="[1]", supported=True),
        ClaimCheck(claim="Oslo  is in Norway.", source="[1] ", supported=True),  # same after whitespace
        ClaimCheck(claim="Oslo is in Norway.", source="[2]", supported=False),
        ClaimCheck(claim="Bergen is rainy."),
    ]
    reliability = reliability_from_claims(claims)
    assert (reliability.n_total, reliability.n_cited, reliability.n_supported, reliability.n_duplicates) == (3, 2, 1, 1)
    assert reliability.factual_accuracy == pytest.approx(5.0)  # 1 of 2 cited triplets supported
    assert reliability.citation_coverage == pytest.approx(20 / 3)  # 2 of 3 triplets cited


@pytest.mark.parametrize("score", [-0.5, 10.5])
def test_scores_outside_zero_to_ten_are_rejected(score: float) -> None:
    with pytest.raises(ValidationError):
        DimensionJudgement.model_validate(_dimension(1.0, (1.0, score)))


def test_a_report_with_no_claims_scores_zero_r_by_default_and_undefined_when_excluded() -> None:
    zero = pqr_scores(PQRInput.model_validate(_judged([])))
    assert zero.reliability.n_total == 0 and zero.reliability.no_cited_claims
    assert (zero.reliability.factual_accuracy, zero.reliability.citation_coverage, zero.reliability.score) == (0, 0, 0)
    assert zero.overall == pytest.approx((6.7 + 6.5 + 0) / 3)
    excluded = pqr_scores(PQRInput.model_validate(_judged([], no_citation="exclude")))
    assert excluded.reliability.factual_accuracy is None and excluded.reliability.citation_coverage is None
    assert excluded.reliability.score is None and excluded.overall is None


def test_no_cited_claims_gives_zero_coverage_and_fa_zero_unless_excluded() -> None:
    uncited = [ClaimCheck(claim="x"), ClaimCheck(claim="y", source="  ")]
    reliability = reliability_from_claims(uncited)
    assert (reliability.n_total, reliability.n_cited) == (2, 0)
    assert reliability.no_cited_claims
    assert (reliability.citation_coverage, reliability.factual_accuracy, reliability.score) == (0.0, 0.0, 0.0)
    excluded = reliability_from_claims(uncited, no_citation="exclude")
    assert excluded.citation_coverage == 0.0 and excluded.factual_accuracy is None and excluded.score is None


def test_fully_supported_and_cited_report_scores_ten() -> None:
    reliability = factual_reliability(n_total=7, n_cited=7, n_supported=7)
    assert (reliability.factual_accuracy, reliability.citation_coverage, reliability.score) == (10.0, 10.0, 10.0)


def test_uncited_claim_cannot_be_supported() -> None:
    with pytest.raises(ValidationError, match="uncited claim cannot be supported"):
        ClaimCheck(claim="x", supported=True)
    with pytest.raises(ValidationError, match="could not be read cannot be supported"):
        ClaimCheck(claim="x", source="[1]", source_read=False, supported=True)


def test_claims_whose_source_was_unreadable_count_unsupported_or_leave_fas_denominator() -> None:
    claims = [
        {"claim": "a", "source": "[1]", "supported": True},
        {"claim": "b", "source": "[2]", "supported": False},
        {"claim": "c", "source": "[3]", "source_read": False},
        {"claim": "d", "source": "[3]", "source_read": False},
        {"claim": "e"},
    ]
    unsupported = pqr_scores(PQRInput.model_validate(_judged(claims))).reliability
    assert unsupported.factual_accuracy == pytest.approx(10 * 1 / 4) and unsupported.n_unreadable == 2
    assert unsupported.citation_coverage == pytest.approx(10 * 4 / 5) and unsupported.fa_denominator == 4
    excluded = pqr_scores(PQRInput.model_validate(_judged(claims, unreadable="exclude"))).reliability
    assert excluded.factual_accuracy == pytest.approx(10 * 1 / 2) and excluded.fa_denominator == 2
    assert excluded.citation_coverage == pytest.approx(8.0)  # still cited
    # nothing readable and excluded: FA has no denominator
    none_read = reliability_from_claims([ClaimCheck(claim="c", source="[3]", source_read=False)], unreadable="exclude")
    assert none_read.factual_accuracy is None and none_read.score is None and not none_read.no_cited_claims
    # pooled FA (FACT) uses each report's denominator
    pooled = aggregate_pqr([pqr_scores(PQRInput.model_validate(_judged(claims, unreadable="exclude")))])
    assert pooled.pooled_factual_accuracy == pytest.approx(5.0)


@pytest.mark.parametrize("counts", [(3, 4, 1), (3, 2, 3), (-1, 0, 0)])
def test_inconsistent_claim_counts_raise(counts: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="supported <= cited <= total"):
        factual_reliability(*counts)
    with pytest.raises(ValueError, match="unreadable <= cited - supported"):
        factual_reliability(4, 3, 2, n_unreadable=2)


def test_aggregate_averages_each_column_and_pools_triplets_the_fact_way() -> None:
    # report 1: 2 triplets, 1 cited and supported: FA 10, CC 5
    cited = pqr_scores(PQRInput.model_validate(_judged([{"source": "u", "supported": True}, {"claim": "z"}])))
    # report 2: 1 uncited triplet: FA 0 (no citation), CC 0
    uncited = pqr_scores(PQRInput.model_validate(_judged([{"claim": "z"}])))
    # report 3: 4 cited triplets, 1 supported, 1 unsupported, 2 unknown: FA 2.5, CC 10
    mixed = pqr_scores(
        PQRInput.model_validate(
            _judged(
                [
                    {"claim": "a", "source": "s", "supported": True},
                    {"claim": "b", "source": "s", "supported": False},
                    {"claim": "c", "source": "s", "supported": None},
                    {"claim": "d", "source": "s"},
                ]
            )
        )
    )
    summary = aggregate_pqr([cited, uncited, mixed])
    assert summary.n_cases == 3 and summary.no_cited_claims == 1
    assert summary.factual_accuracy == pytest.approx((10 + 0 + 2.5) / 3)  # the uncited report is not dropped
    assert summary.citation_coverage == pytest.approx((5 + 0 + 10) / 3)
    assert summary.reliability == pytest.approx(((12.5 / 3) + 5) / 2)
    # pooled: 2 supported of 5 cited triplets; 5 cited of 7 triplets
    assert summary.pooled_factual_accuracy == pytest.approx(4.0)
    assert summary.pooled_citation_coverage == pytest.approx(50 / 7)
    assert summary.dimensions["GOAL"] == pytest.approx(7.0)
    assert summary.overall == pytest.approx((6.7 + 6.5 + summary.reliability) / 3)

    excluded = [
        pqr_scores(PQRInput.model_validate(_judged(c, no_citation="exclude")))
        for c in ([{"source": "u", "supported": True}, {"claim": "z"}], [{"claim": "z"}])
    ]
    summary = aggregate_pqr(excluded)
    assert summary.factual_accuracy == pytest.approx(10.0)  # only the report with a citation
    assert summary.no_cited_claims == 1
    with pytest.raises(ValueError):
        aggregate_pqr([])
