"""PDR-Bench PQR scores: Personalization (P), content Quality (Q), factual Reliability (R), overall.

P and Q are two-level weighted averages (PDR-Bench Eq. 1 and 2):
    S = sum_d w_d * sum_{c in C_d} w_c * s_c,   s_c in [0, 10],
with dimension weights w_d summing to 1 and, within each dimension, sub-criterion weights w_c summing
to 1. P uses the dimensions GOAL, CONT, PRES, ACTI; Q uses DEIN, LOGC, CLAR. Weights are used as
given (no renormalisation); a weight vector off 1 by more than `WEIGHT_SUM_TOLERANCE` is an error.

R comes from the deduplicated claim triplets (claim, source): N_total triplets, N_cited of them with
a source, v_i = 1 when a cited claim is supported by its source (Eq. 4 and 5):
    FA = 10 * sum v_i / N_cited,   CC = 10 * N_cited / N_total,   S_R = (FA + CC) / 2.
A claim citing two sources is two triplets (the paper's extraction prompt, Appendix I.3).
The overall score is (S_P + S_Q + S_R) / 3 (Eq. 6).

Edge cases the paper leaves open, resolved here:
- no cited claims: FA is 0/0, so it is undefined (None) rather than 0. CC is then 0. The paper's
  Table 1 supports this reading: GPT-4.1 w/Search has CC 0.10 (almost nothing cited) yet FA 6.75,
  which cannot happen if its uncited reports counted as FA = 0.
- no claims at all: FA and CC are both undefined (None).
- S_R needs both FA and CC, and the per-case overall needs S_R; otherwise they are None.
`aggregate_pqr` averages cases the way the paper's tables do: each column is the mean over the cases
where it is defined, and R and overall are recomputed from the column means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from benchmarks.metrics.models import MetricInput, MetricResult
from benchmarks.metrics.weights import check_weights_sum_to_one

PersonalizationDimension = Literal["GOAL", "CONT", "PRES", "ACTI"]
QualityDimension = Literal["DEIN", "LOGC", "CLAR"]
PERSONALIZATION_DIMENSIONS: tuple[str, ...] = ("GOAL", "CONT", "PRES", "ACTI")
QUALITY_DIMENSIONS: tuple[str, ...] = ("DEIN", "LOGC", "CLAR")

MAX_SCORE = 10.0


class CriterionJudgement(MetricInput):
    """One generated sub-criterion with its weight and the judge's score for the report."""

    criterion: str = Field(default="", description="The sub-criterion text (informational).")
    weight: float = Field(ge=0, le=1, description="Weight w_c within its dimension; a dimension's weights sum to 1.")
    score: float = Field(ge=0, le=MAX_SCORE, description="Judge score s_c in [0, 10].")
    justification: str = Field(default="", description="The judge's justification (informational).")


class DimensionJudgement(MetricInput):
    """One dimension (e.g. GOAL): its weight w_d and its scored sub-criteria."""

    weight: float = Field(ge=0, le=1, description="Dimension weight w_d; the axis's dimension weights sum to 1.")
    criteria: list[CriterionJudgement] = Field(min_length=1, description="Scored sub-criteria C_d.")

    @model_validator(mode="after")
    def _criteria_weights_sum_to_one(self) -> DimensionJudgement:
        check_weights_sum_to_one(
            {_criterion_label(i, c.criterion): c.weight for i, c in enumerate(self.criteria)}, "sub-criterion weights"
        )
        return self

    @property
    def score(self) -> float:
        """S_d: the weighted average of the sub-criterion scores."""
        return math.fsum(c.weight * c.score for c in self.criteria)


def _criterion_label(index: int, criterion: str, max_chars: int = 40) -> str:
    """'#2 "Explains posture..."': short enough to keep a weight error on one line."""
    if not criterion:
        return f"#{index + 1}"
    text = criterion if len(criterion) <= max_chars else criterion[: max_chars - 3] + "..."
    return f'#{index + 1} "{text}"'


class AxisScore(MetricResult):
    """A two-level weighted score (P or Q) with its per-dimension scores S_d."""

    score: float = Field(description="S_P or S_Q in [0, 10].")
    dimensions: dict[str, float] = Field(description="S_d per dimension code.")


def weighted_axis_score(
    dimensions: Mapping[str, DimensionJudgement], required: Sequence[str], axis: str
) -> AxisScore:
    """S = sum_d w_d * S_d over exactly the `required` dimensions, after checking the dimension weights."""
    _check_dimension_set(dimensions, required, axis)
    per_dimension = {code: dimensions[code].score for code in required}
    total = math.fsum(dimensions[code].weight * per_dimension[code] for code in required)
    return AxisScore(score=total, dimensions=per_dimension)


def personalization_score(dimensions: Mapping[str, DimensionJudgement]) -> AxisScore:
    """S_P over GOAL, CONT, PRES, ACTI (PDR-Bench Eq. 1)."""
    return weighted_axis_score(dimensions, PERSONALIZATION_DIMENSIONS, "personalization")


def quality_score(dimensions: Mapping[str, DimensionJudgement]) -> AxisScore:
    """S_Q over DEIN, LOGC, CLAR (PDR-Bench Eq. 2)."""
    return weighted_axis_score(dimensions, QUALITY_DIMENSIONS, "quality")


def _check_dimension_set(dimensions: Mapping[str, DimensionJudgement], required: Sequence[str], axis: str) -> None:
    missing = [code for code in required if code not in dimensions]
    unknown = [code for code in dimensions if code not in required]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown {', '.join(unknown)}")
        raise ValueError(f"{axis} dimensions must be exactly {', '.join(required)}: {'; '.join(problems)}")
    check_weights_sum_to_one({code: dimensions[code].weight for code in required}, f"{axis} dimension weights")


class ClaimCheck(MetricInput):
    """One deduplicated (claim, source) triplet and its support verdict v_i."""

    claim: str = Field(default="", description="The factual claim (informational).")
    source: str | None = Field(
        default=None, description="URL or reference index the claim cites; empty or null when uncited."
    )
    supported: bool | None = Field(
        default=None,
        description="v_i: true when the cited source supports the claim; false or null (unknown) count as 0. "
        "Must not be true for an uncited claim.",
    )

    @property
    def cited(self) -> bool:
        return bool(self.source and self.source.strip())

    @model_validator(mode="after")
    def _uncited_claims_are_not_supported(self) -> ClaimCheck:
        if self.supported and not self.cited:
            raise ValueError("an uncited claim cannot be supported by its source (supported=true without source)")
        return self


class FactualReliability(MetricResult):
    n_total: int = Field(description="Unique claim triplets.")
    n_cited: int = Field(description="Triplets with a source.")
    n_supported: int = Field(description="Cited triplets supported by their source (sum of v_i).")
    factual_accuracy: float | None = Field(description="FA in [0, 10]; None when no claim is cited.")
    citation_coverage: float | None = Field(description="CC in [0, 10]; None when there are no claims.")
    score: float | None = Field(description="S_R = (FA + CC) / 2; None when FA or CC is undefined.")


def factual_reliability(n_total: int, n_cited: int, n_supported: int) -> FactualReliability:
    """FA, CC and S_R from claim counts (PDR-Bench Eq. 5), with undefined ratios as None."""
    if not 0 <= n_supported <= n_cited <= n_total:
        raise ValueError(
            f"claim counts must satisfy 0 <= supported <= cited <= total, got "
            f"supported={n_supported}, cited={n_cited}, total={n_total}"
        )
    fa = MAX_SCORE * n_supported / n_cited if n_cited else None
    cc = MAX_SCORE * n_cited / n_total if n_total else None
    score = (fa + cc) / 2 if fa is not None and cc is not None else None
    return FactualReliability(
        n_total=n_total,
        n_cited=n_cited,
        n_supported=n_supported,
        factual_accuracy=fa,
        citation_coverage=cc,
        score=score,
    )


def reliability_from_claims(claims: Sequence[ClaimCheck]) -> FactualReliability:
    cited = [c for c in claims if c.cited]
    return factual_reliability(len(claims), len(cited), sum(1 for c in cited if c.supported))


def overall_score(personalization: float, quality: float, reliability: float | None) -> float | None:
    """S_overall = (S_P + S_Q + S_R) / 3 (PDR-Bench Eq. 6); None when S_R is undefined."""
    if reliability is None:
        return None
    return (personalization + quality + reliability) / 3


class PQRInput(MetricInput):
    """A judged report: P and Q dimensions with weights and scored sub-criteria, and its verified claims."""

    personalization: dict[PersonalizationDimension, DimensionJudgement] = Field(
        description="Exactly GOAL, CONT, PRES, ACTI; dimension weights sum to 1."
    )
    quality: dict[QualityDimension, DimensionJudgement] = Field(
        description="Exactly DEIN, LOGC, CLAR; dimension weights sum to 1."
    )
    claims: list[ClaimCheck] = Field(description="Deduplicated claim triplets with support verdicts (may be empty).")

    @field_validator("personalization")
    @classmethod
    def _personalization_dimensions(cls, value: dict[str, DimensionJudgement]) -> dict[str, DimensionJudgement]:
        _check_dimension_set(value, PERSONALIZATION_DIMENSIONS, "personalization")
        return value

    @field_validator("quality")
    @classmethod
    def _quality_dimensions(cls, value: dict[str, DimensionJudgement]) -> dict[str, DimensionJudgement]:
        _check_dimension_set(value, QUALITY_DIMENSIONS, "quality")
        return value


class PQRResult(MetricResult):
    personalization: AxisScore
    quality: AxisScore
    reliability: FactualReliability
    overall: float | None = Field(description="(S_P + S_Q + S_R) / 3; None when S_R is undefined.")


def pqr_scores(judged: PQRInput) -> PQRResult:
    """All PQR scores of one report."""
    p = personalization_score(judged.personalization)
    q = quality_score(judged.quality)
    r = reliability_from_claims(judged.claims)
    return PQRResult(personalization=p, quality=q, reliability=r, overall=overall_score(p.score, q.score, r.score))


class PQRSummary(MetricResult):
    """Per-system PQR means in the layout of PDR-Bench Table 1."""

    n_cases: int
    personalization: float
    quality: float
    dimensions: dict[str, float] = Field(description="Mean S_d per dimension code.")
    factual_accuracy: float | None = Field(description="Mean FA over cases with at least one cited claim.")
    citation_coverage: float | None = Field(description="Mean CC over cases with at least one claim.")
    reliability: float | None = Field(description="(mean FA + mean CC) / 2.")
    overall: float | None = Field(description="(mean S_P + mean S_Q + R) / 3.")


def aggregate_pqr(results: Sequence[PQRResult]) -> PQRSummary:
    """Average per-case PQR results into one system row, each column over the cases where it is defined."""
    if not results:
        raise ValueError("aggregate_pqr needs at least one result")
    p = _mean([r.personalization.score for r in results])
    q = _mean([r.quality.score for r in results])
    dimensions = {code: _mean([r.personalization.dimensions[code] for r in results]) for code in PERSONALIZATION_DIMENSIONS}
    dimensions |= {code: _mean([r.quality.dimensions[code] for r in results]) for code in QUALITY_DIMENSIONS}
    fa = _mean_defined([r.reliability.factual_accuracy for r in results])
    cc = _mean_defined([r.reliability.citation_coverage for r in results])
    reliability = (fa + cc) / 2 if fa is not None and cc is not None else None
    return PQRSummary(
        n_cases=len(results),
        personalization=p,
        quality=q,
        dimensions=dimensions,
        factual_accuracy=fa,
        citation_coverage=cc,
        reliability=reliability,
        overall=overall_score(p, q, reliability),
    )


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _mean_defined(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return _mean(defined) if defined else None
