"""PDR-Bench PQR scores: Personalization (P), content Quality (Q), factual Reliability (R), overall.

P and Q are two-level weighted averages (PDR-Bench Eq. 1 and 2):
    S = sum_d w_d * S_d,   S_d = sum_{c in C_d} w_c * s_c,   s_c in [0, 10],
with dimension weights w_d and, within each dimension, sub-criterion weights w_c that the paper asks
to sum to 1. P uses the dimensions GOAL, CONT, PRES, ACTI; Q uses DEIN, LOGC, CLAR, or the dimensions
of a task's shipped criteria (DeepResearch Bench) when the case has them.

Where the paper is silent — a criterion the judge did not score, weights that do not sum exactly to
1 — the math is DeepResearch Bench's, which PDR-Bench builds on: `utils/score_calculator.py`,
`calculate_weighted_scores` (github.com/Ayanami0730/deep_research_bench), read line by line:
- a criterion without a score is left out of its dimension: S_d = sum_scored w_c s_c / sum_scored w_c
  (so sub-criterion weights need not sum to 1: they are divided by the scored ones' sum);
- a dimension none of whose criteria was scored (or whose scored criteria weigh 0) has S_d = 0, and
  keeps its weight in the axis;
- S = sum_d w_d S_d with the dimension weights as given: not divided by their sum, so weights summing
  to 0.9 give at most 9. `weight_sum` shows what they summed to.
With every criterion scored and weights summing to 1 this is exactly Eq. 1. What was not scored lowers
`coverage` (the share of the axis's weight that was scored), which is reported with `skipped_criteria`
and `unscored_dimensions`. (The judge normalises the weights a model writes before they get here, and
fails a judgment none of whose criteria on an axis was scored.)

R comes from the deduplicated claim triplets (claim, source): exact duplicate (claim, source) pairs
count once; N_total unique triplets, N_cited of them with a source, v_i = 1 when a cited claim is
supported by its source, 0 when unsupported or unknown (Eq. 4 and 5):
    FA = 10 * sum v_i / N_cited,   CC = 10 * N_cited / N_total,   S_R = (FA + CC) / 2.
A claim citing two sources is two triplets (the paper's extraction prompt, Appendix I.3).
The overall score is (S_P + S_Q + S_R) / 3 (Eq. 6).

A cited source the fact-checker could not read makes its claims unknown (v_i = 0, Eq. 4), the default
`unreadable = "unsupported"`; under `"exclude"` such claims leave FA's denominator (they still count as
cited for CC), and FA is undefined when no cited source could be read.

A report with no cited claim (FA = 0/0) is never dropped silently: under `no_citation = "zero"`
(the default) its FA is 0 (and CC is 0 when it has no claim at all), so its R is low rather than
missing; under `"exclude"` FA (and then R and overall) are undefined (None) and such reports are
left out of the FA mean. Either way `no_cited_claims` marks the report and `aggregate_pqr` counts
them. `aggregate_pqr` averages reports the way the paper's tables do (each column over the reports
where it is defined, R and overall recomputed from the column means) and adds the pooled FA and CC
over all triplets of all reports (DeepResearch Bench's FACT convention).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal, TypeVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

PersonalizationDimension = Literal["GOAL", "CONT", "PRES", "ACTI"]
PERSONALIZATION_DIMENSIONS: tuple[str, ...] = ("GOAL", "CONT", "PRES", "ACTI")
QUALITY_DIMENSIONS: tuple[str, ...] = ("DEIN", "LOGC", "CLAR")
NoCitation = Literal["zero", "exclude"]
Unreadable = Literal["unsupported", "exclude"]

MAX_SCORE = 10.0


class CriterionJudgement(MetricInput):
    """One sub-criterion with its weight and the judge's score for the report (None: not scored)."""

    criterion: str = Field(default="", description="The sub-criterion text (informational).")
    weight: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Weight w_c within its dimension (the paper's "
        "weights sum to 1; other sums are divided out, as DeepResearch Bench does).",
    )
    score: float | None = Field(
        ge=0,
        le=MAX_SCORE,
        description="Judge score s_c in [0, 10]; null when the judge gave none (not scored: "
        "left out of its dimension's weighted mean).",
    )
    justification: str = Field(default="", description="The judge's analysis (informational).")


class DimensionJudgement(MetricInput):
    """One dimension (e.g. GOAL): its weight w_d and its scored sub-criteria."""

    weight: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Dimension weight w_d, used as given (the paper's "
        "weights sum to 1; S = sum w_d S_d is not divided by their sum, as in DeepResearch Bench).",
    )
    criteria: list[CriterionJudgement] = Field(min_length=1, description="Sub-criteria C_d with their scores.")

    @property
    def weight_sum(self) -> float:
        """The sub-criterion weights' sum, as given."""
        return math.fsum(c.weight for c in self.criteria)

    @property
    def scored_weight(self) -> float:
        return math.fsum(c.weight for c in self.criteria if c.score is not None)

    @property
    def coverage(self) -> float:
        """The share of the criteria's weight that was scored (1 when none was skipped)."""
        total = self.weight_sum
        return self.scored_weight / total if total > 0 else 0.0

    @property
    def skipped(self) -> int:
        return sum(c.score is None for c in self.criteria)

    @property
    def unscored(self) -> bool:
        """No scored criterion carries weight: S_d is 0 (calculate_weighted_scores: dim_total_weight == 0)."""
        return self.scored_weight <= 0

    @property
    def score(self) -> float:
        """S_d: the criterion-weighted mean over the scored criteria, 0 when none was scored
        (DeepResearch Bench, utils/score_calculator.py, calculate_weighted_scores)."""
        scored = [(c.weight, c.score) for c in self.criteria if c.score is not None]
        total = math.fsum(w for w, _ in scored)
        return math.fsum(w * s for w, s in scored) / total if total > 0 else 0.0


class AxisScore(MetricResult):
    """A two-level weighted score (P or Q) with its per-dimension scores S_d."""

    score: float = Field(description="S_P or S_Q: sum_d w_d S_d, in [0, 10] when the weights sum to 1.")
    dimensions: dict[str, float] = Field(description="S_d per dimension code (0 when none of its criteria was scored).")
    weights: dict[str, float] = Field(default_factory=dict, description="w_d per dimension code, as given.")
    weight_sum: float = Field(default=1.0, description="The dimension weights' sum, as given (S is not divided by it).")
    coverage: float = Field(
        default=1.0, description="Share of the axis's weight that was scored (1 = nothing skipped)."
    )
    skipped_criteria: int = Field(default=0, description="Criteria the judge gave no score.")
    unscored_dimensions: list[str] = Field(
        default_factory=list, description="Dimensions none of whose criteria was scored (S_d = 0)."
    )


Code = TypeVar("Code", bound=str)  # a dimension code: any string, or `PersonalizationDimension`


def weighted_axis_score(
    dimensions: Mapping[Code, DimensionJudgement], required: Sequence[str] | None, axis: str
) -> AxisScore:
    """S = sum_d w_d * S_d over the dimensions (exactly `required` when given), weights as given; an
    unscored criterion leaves its dimension's mean, an unscored dimension scores 0
    (DeepResearch Bench, utils/score_calculator.py, calculate_weighted_scores)."""
    if required is not None:
        _check_dimension_set(dimensions, required, axis)
    elif not dimensions:
        raise ValueError(f"{axis} needs at least one dimension")
    weight_sum = math.fsum(d.weight for d in dimensions.values())
    return AxisScore(
        score=math.fsum(d.weight * d.score for d in dimensions.values()),
        dimensions={code: d.score for code, d in dimensions.items()},
        weights={code: d.weight for code, d in dimensions.items()},
        weight_sum=weight_sum,
        coverage=math.fsum(d.weight * d.coverage for d in dimensions.values()) / weight_sum if weight_sum > 0 else 0.0,
        skipped_criteria=sum(d.skipped for d in dimensions.values()),
        unscored_dimensions=[code for code, d in dimensions.items() if d.unscored],
    )


def personalization_score(dimensions: Mapping[Code, DimensionJudgement]) -> AxisScore:
    """S_P over GOAL, CONT, PRES, ACTI (PDR-Bench Eq. 1)."""
    return weighted_axis_score(dimensions, PERSONALIZATION_DIMENSIONS, "personalization")


def quality_score(dimensions: Mapping[str, DimensionJudgement], shipped: bool = False) -> AxisScore:
    """S_Q over DEIN, LOGC, CLAR (PDR-Bench Eq. 2), or over a task's shipped criteria dimensions."""
    return weighted_axis_score(dimensions, None if shipped else QUALITY_DIMENSIONS, "quality")


def _check_dimension_set(dimensions: Mapping[Code, DimensionJudgement], required: Sequence[str], axis: str) -> None:
    missing = [code for code in required if code not in dimensions]
    unknown = [code for code in dimensions if code not in required]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown {', '.join(unknown)}")
        raise ValueError(f"{axis} dimensions must be exactly {', '.join(required)}: {'; '.join(problems)}")


class ClaimCheck(MetricInput):
    """One (claim, source) triplet and its support verdict v_i."""

    claim: str = Field(default="", description="The factual claim.")
    source: str | None = Field(
        default=None, description="URL or reference index the claim cites; empty or null when uncited."
    )
    supported: bool | None = Field(
        default=None,
        description="v_i: true when the cited source supports the claim; false or null (unknown) count as 0. "
        "Must not be true for an uncited claim.",
    )
    source_read: bool = Field(
        default=True,
        description="false when the cited source could not be read (the claim is then unknown; "
        "unreadable='exclude' leaves it out of FA's denominator).",
    )

    @property
    def cited(self) -> bool:
        return bool(self.source and self.source.strip())

    def identity(self) -> tuple[str, str]:
        """What makes two triplets the same: the claim (whitespace-normalised) and the source."""
        return " ".join(self.claim.split()), (self.source or "").strip()

    @model_validator(mode="after")
    def _uncited_claims_are_not_supported(self) -> ClaimCheck:
        if self.supported and not self.cited:
            raise ValueError("an uncited claim cannot be supported by its source (supported=true without source)")
        if self.supported and not self.source_read:
            raise ValueError(
                "a claim whose source could not be read cannot be supported (supported=true with source_read=false)"
            )
        return self


def dedupe_claims(claims: Sequence[ClaimCheck]) -> list[ClaimCheck]:
    """Exact duplicate (claim, source) triplets count once; the first one is kept."""
    seen: set[tuple[str, str]] = set()
    unique = []
    for claim in claims:
        if claim.identity() not in seen:
            seen.add(claim.identity())
            unique.append(claim)
    return unique


class FactualReliability(MetricResult):
    n_total: int = Field(description="Unique claim triplets.")
    n_cited: int = Field(description="Triplets with a source.")
    n_supported: int = Field(description="Cited triplets supported by their source (sum of v_i).")
    n_duplicates: int = Field(default=0, description="Exact duplicate triplets dropped before counting.")
    n_unreadable: int = Field(default=0, description="Cited triplets whose source could not be read.")
    fa_denominator: int | None = Field(
        default=None,
        description="Cited triplets FA is over: N_cited, less the unreadable ones under "
        "unreadable='exclude' (None in results older than the option: N_cited).",
    )
    no_cited_claims: bool = Field(default=False, description="The report cites no claim (FA is 0/0).")
    factual_accuracy: float | None = Field(
        description="FA in [0, 10]; None when no claim is cited and excluded, or "
        "no cited source could be read and unreadable ones are excluded."
    )
    citation_coverage: float | None = Field(description="CC in [0, 10]; None when there are no claims and excluded.")
    score: float | None = Field(description="S_R = (FA + CC) / 2; None when FA or CC is undefined.")

    @property
    def fa_over(self) -> int:
        return self.n_cited if self.fa_denominator is None else self.fa_denominator


def factual_reliability(
    n_total: int,
    n_cited: int,
    n_supported: int,
    no_citation: NoCitation = "zero",
    n_duplicates: int = 0,
    n_unreadable: int = 0,
    unreadable: Unreadable = "unsupported",
) -> FactualReliability:
    """FA, CC and S_R from claim counts (PDR-Bench Eq. 5); 0/0 follows `no_citation`; claims whose
    source could not be read count as unsupported, or (`unreadable = "exclude"`) leave FA's denominator."""
    if not 0 <= n_supported <= n_cited <= n_total or not 0 <= n_unreadable <= n_cited - n_supported:
        raise ValueError(
            f"claim counts must satisfy 0 <= supported <= cited <= total and 0 <= unreadable <= cited - supported, "
            f"got supported={n_supported}, cited={n_cited}, total={n_total}, unreadable={n_unreadable}"
        )
    undefined = 0.0 if no_citation == "zero" else None
    over = n_cited - n_unreadable if unreadable == "exclude" else n_cited
    if not n_cited:
        fa = undefined
    else:
        fa = MAX_SCORE * n_supported / over if over else None  # every cited source unreadable, and excluded
    cc = MAX_SCORE * n_cited / n_total if n_total else undefined
    return FactualReliability(
        n_total=n_total,
        n_cited=n_cited,
        n_supported=n_supported,
        n_duplicates=n_duplicates,
        n_unreadable=n_unreadable,
        fa_denominator=over,
        no_cited_claims=n_cited == 0,
        factual_accuracy=fa,
        citation_coverage=cc,
        score=(fa + cc) / 2 if fa is not None and cc is not None else None,
    )


def reliability_from_claims(
    claims: Sequence[ClaimCheck], no_citation: NoCitation = "zero", unreadable: Unreadable = "unsupported"
) -> FactualReliability:
    unique = dedupe_claims(claims)
    cited = [c for c in unique if c.cited]
    return factual_reliability(
        len(unique),
        len(cited),
        sum(1 for c in cited if c.supported),
        no_citation,
        n_duplicates=len(claims) - len(unique),
        n_unreadable=sum(1 for c in cited if not c.source_read),
        unreadable=unreadable,
    )


def overall_score(personalization: float | None, quality: float | None, reliability: float | None) -> float | None:
    """S_overall = (S_P + S_Q + S_R) / 3 (PDR-Bench Eq. 6); None when any of them is undefined."""
    if personalization is None or quality is None or reliability is None:
        return None
    return (personalization + quality + reliability) / 3


class PQRInput(MetricInput):
    """A judged report: P and Q dimensions with weights and scored sub-criteria, and its verified claims."""

    personalization: dict[PersonalizationDimension, DimensionJudgement] = Field(
        description="Exactly GOAL, CONT, PRES, ACTI, with their weights (used as given)."
    )
    quality_source: Literal["generated", "shipped"] = Field(
        default="generated", description="'shipped': Q uses a task's shipped criteria (DeepResearch Bench)."
    )
    quality: dict[str, DimensionJudgement] = Field(
        description="Exactly DEIN, LOGC, CLAR (or, with quality_source='shipped', a task's own dimensions), with "
        "their weights (used as given)."
    )
    claims: list[ClaimCheck] = Field(description="Claim triplets with support verdicts (may be empty).")
    no_citation: NoCitation = Field(
        default="zero", description="A report with no cited claim: FA = 0 ('zero') or undefined ('exclude')."
    )
    unreadable: Unreadable = Field(
        default="unsupported",
        description="Claims whose source could not be read (source_read=false): unsupported "
        "(v_i = 0, the default), or left out of FA's denominator ('exclude').",
    )

    @field_validator("personalization")
    @classmethod
    def _personalization_dimensions(cls, value: dict[str, DimensionJudgement]) -> dict[str, DimensionJudgement]:
        _check_dimension_set(value, PERSONALIZATION_DIMENSIONS, "personalization")
        return value

    @field_validator("quality")
    @classmethod
    def _quality_dimensions(
        cls, value: dict[str, DimensionJudgement], info: ValidationInfo
    ) -> dict[str, DimensionJudgement]:
        quality_score(value, shipped=info.data.get("quality_source") == "shipped")
        return value


class PQRResult(MetricResult):
    personalization: AxisScore | None
    quality: AxisScore | None
    reliability: FactualReliability | None
    overall: float | None = Field(description="(S_P + S_Q + S_R) / 3; None when any axis is undefined.")


def pqr_scores(judged: PQRInput) -> PQRResult:
    """All PQR scores of one report."""
    p = personalization_score(judged.personalization)
    q = quality_score(judged.quality, shipped=judged.quality_source == "shipped")
    r = reliability_from_claims(judged.claims, judged.no_citation, judged.unreadable)
    return PQRResult(personalization=p, quality=q, reliability=r, overall=overall_score(p.score, q.score, r.score))


class PQRSummary(MetricResult):
    """Per-system PQR means in the layout of PDR-Bench Table 1, with the pooled FACT rates."""

    n_cases: int
    personalization: float | None
    quality: float | None
    dimensions: dict[str, float | None] = Field(description="Mean S_d per dimension code.")
    factual_accuracy: float | None = Field(description="Mean FA over reports where it is defined.")
    citation_coverage: float | None = Field(description="Mean CC over reports where it is defined.")
    reliability: float | None = Field(description="(mean FA + mean CC) / 2.")
    overall: float | None = Field(description="(mean S_P + mean S_Q + R) / 3.")
    pooled_factual_accuracy: float | None = Field(description="10 x all supported / all cited triplets (FACT).")
    pooled_citation_coverage: float | None = Field(description="10 x all cited / all triplets.")
    no_cited_claims: int = Field(description="Reports that cite no claim.")


def aggregate_pqr(results: Sequence[PQRResult]) -> PQRSummary:
    """Average per-report PQR results into one system row, each column over the reports where it is defined."""
    if not results:
        raise ValueError("aggregate_pqr needs at least one result")
    p = _mean_defined([r.personalization.score if r.personalization else None for r in results])
    q = _mean_defined([r.quality.score if r.quality else None for r in results])
    codes = list(
        dict.fromkeys(c for r in results for axis in (r.personalization, r.quality) if axis for c in axis.dimensions)
    )
    dimensions = {
        code: _mean_defined(
            [axis.dimensions.get(code) for r in results for axis in (r.personalization, r.quality) if axis]
        )
        for code in codes
    }
    reliabilities = [r.reliability for r in results if r.reliability is not None]
    fa = _mean_defined([r.factual_accuracy for r in reliabilities])
    cc = _mean_defined([r.citation_coverage for r in reliabilities])
    reliability = (fa + cc) / 2 if fa is not None and cc is not None else None
    pooled = pooled_reliability(reliabilities)
    return PQRSummary(
        n_cases=len(results),
        personalization=p,
        quality=q,
        dimensions=dimensions,
        factual_accuracy=fa,
        citation_coverage=cc,
        reliability=reliability,
        overall=overall_score(p, q, reliability),
        pooled_factual_accuracy=pooled.factual_accuracy,
        pooled_citation_coverage=pooled.citation_coverage,
        no_cited_claims=pooled.no_cited_claims,
    )


class PooledReliability(MetricResult):
    factual_accuracy: float | None = Field(
        description="10 x all supported / all cited triplets of all reports "
        "(less the unreadable ones where they are excluded)."
    )
    citation_coverage: float | None = Field(description="10 x all cited / all triplets of all reports.")
    no_cited_claims: int = Field(description="Reports that cite no claim.")
    reports: int


def pooled_reliability(reliabilities: Sequence[FactualReliability]) -> PooledReliability:
    """FA and CC over every triplet of every report (DeepResearch Bench's FACT convention)."""
    cited = sum(r.n_cited for r in reliabilities)
    over = sum(r.fa_over for r in reliabilities)
    total = sum(r.n_total for r in reliabilities)
    return PooledReliability(
        factual_accuracy=MAX_SCORE * sum(r.n_supported for r in reliabilities) / over if over else None,
        citation_coverage=MAX_SCORE * cited / total if total else None,
        no_cited_claims=sum(r.no_cited_claims for r in reliabilities),
        reports=len(reliabilities),
    )


def _mean_defined(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return math.fsum(defined) / len(defined) if defined else None
