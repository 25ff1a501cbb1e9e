"""PDR-Bench PQR: two-level weighted P and Q, R from FA and CC, overall, weight validation, aggregation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from benchmarks.metrics.pqr import (
    ClaimCheck,
    DimensionJudgement,
    PQRInput,
    aggregate_pqr,
    factual_reliability,
    pqr_scores,
    reliability_from_claims,
)
from benchmarks.metrics.registry import EXAMPLES_DIR


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


def test_dimension_weights_not_summing_to_one_name_the_axis_and_weights() -> None:
    payload = _judged()
    payload["personalization"]["GOAL"]["weight"] = 0.5
    with pytest.raises(ValidationError) as caught:
        PQRInput.model_validate(payload)
    error = caught.value.errors()[0]
    assert error["loc"] == ("personalization",)
    assert "personalization dimension weights must sum to 1" in error["msg"]
    assert "GOAL=0.5, CONT=0.3, PRES=0.2, ACTI=0.1" in error["msg"]
    assert "sum to 1.1" in error["msg"]


def test_sub_criterion_weights_not_summing_to_one_name_the_dimension() -> None:
    payload = _judged()
    payload["quality"]["DEIN"]["criteria"][0]["weight"] = 0.1
    with pytest.raises(ValidationError) as caught:
        PQRInput.model_validate(payload)
    error = caught.value.errors()[0]
    assert error["loc"] == ("quality", "DEIN")
    assert "sub-criterion weights must sum to 1" in error["msg"]
    assert "#1=0.1, #2=0.8" in error["msg"]


def test_weight_tolerance_accepts_three_decimal_thirds_but_not_two_decimal_thirds() -> None:
    DimensionJudgement.model_validate(_dimension(1.0, (0.333, 5), (0.333, 5), (0.333, 5)))
    with pytest.raises(ValidationError, match="sum to 0.99"):
        DimensionJudgement.model_validate(_dimension(1.0, (0.33, 5), (0.33, 5), (0.33, 5)))


def test_missing_and_unknown_dimensions_are_errors() -> None:
    payload = _judged()
    del payload["personalization"]["ACTI"]
    with pytest.raises(ValidationError, match="missing ACTI"):
        PQRInput.model_validate(payload)
    payload = _judged()
    payload["quality"]["GOAL"] = _dimension(0.0, (1.0, 5))
    with pytest.raises(ValidationError) as caught:
        PQRInput.model_validate(payload)
    assert caught.value.errors()[0]["loc"][:2] == ("quality", "GOAL")


@pytest.mark.parametrize("score", [-0.5, 10.5])
def test_scores_outside_zero_to_ten_are_rejected(score: float) -> None:
    with pytest.raises(ValidationError):
        DimensionJudgement.model_validate(_dimension(1.0, (1.0, score)))


def test_no_claims_leaves_fa_cc_r_and_overall_undefined() -> None:
    result = pqr_scores(PQRInput.model_validate(_judged([])))
    assert result.reliability.n_total == 0
    assert result.reliability.factual_accuracy is None
    assert result.reliability.citation_coverage is None
    assert result.reliability.score is None
    assert result.overall is None


def test_no_cited_claims_gives_zero_coverage_and_undefined_accuracy() -> None:
    reliability = reliability_from_claims([ClaimCheck(claim="x"), ClaimCheck(claim="y", source="  ")])
    assert (reliability.n_total, reliability.n_cited) == (2, 0)
    assert reliability.citation_coverage == 0.0
    assert reliability.factual_accuracy is None
    assert reliability.score is None


def test_fully_supported_and_cited_report_scores_ten() -> None:
    reliability = factual_reliability(n_total=7, n_cited=7, n_supported=7)
    assert (reliability.factual_accuracy, reliability.citation_coverage, reliability.score) == (10.0, 10.0, 10.0)


def test_uncited_claim_cannot_be_supported() -> None:
    with pytest.raises(ValidationError, match="uncited claim cannot be supported"):
        ClaimCheck(claim="x", supported=True)


@pytest.mark.parametrize("counts", [(3, 4, 1), (3, 2, 3), (-1, 0, 0)])
def test_inconsistent_claim_counts_raise(counts: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="supported <= cited <= total"):
        factual_reliability(*counts)


def test_aggregate_averages_each_column_over_cases_where_it_is_defined() -> None:
    cited = pqr_scores(PQRInput.model_validate(_judged([{"source": "u", "supported": True}, {"claim": "z"}])))
    uncited = pqr_scores(PQRInput.model_validate(_judged([{"claim": "z"}])))
    summary = aggregate_pqr([cited, uncited])
    assert summary.n_cases == 2
    assert summary.factual_accuracy == pytest.approx(10.0)  # only the case with a citation
    assert summary.citation_coverage == pytest.approx((5.0 + 0.0) / 2)
    assert summary.reliability == pytest.approx((10.0 + 2.5) / 2)
    assert summary.dimensions["GOAL"] == pytest.approx(7.0)
    assert summary.overall == pytest.approx((6.7 + 6.5 + 6.25) / 3)
    with pytest.raises(ValueError):
        aggregate_pqr([])
