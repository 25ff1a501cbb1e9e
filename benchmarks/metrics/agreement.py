"""Meta-evaluation: how well a judge agrees with human (or another judge's) labels.

PCA and MARD follow PDR-Bench Appendix C. For each query q and criterion c two reports A and B are
scored by the model (m) and by humans (h):
    PCA  = (1/N) sum_{q,c} 1[sgn(m^A - m^B) = sgn(h^A - h^B)]      over the N (query, criterion) pairs,
    MARD = sum_q sum_{r in {A,B}} sum_{c in C_q} |m^r - h^r| / sum_q 2|C_q|,
so a tie counts as agreement only when both sides tie, and MARD is the mean absolute deviation over
every (query, report, criterion) score. Pearson and Spearman correlations (scipy.stats) compare two
paired score lists, as BESPOKE's score alignment does; they are None when undefined (fewer than two
pairs or a constant list), and so is a p-value scipy cannot give (it returns NaN, e.g. Spearman on two
pairs) — nothing here is ever NaN, so every result serialises as strict JSON.

A run's meta-evaluation (`criterion_agreement`) is per criterion: each criterion's figures come from
its own scores only, because criteria live on different scales (BESPOKE's 1-5 ratings, a 0-1 recall,
a 0-100 headline) and one correlation over all of them measures the scale gap, not agreement. An
average over criteria (`average_agreement`, BESPOKE Table 3's "Avg.") is the mean of the
per-criterion figures; MARD is in each criterion's own units and is not averaged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field, FiniteFloat, model_validator
from scipy import stats

from atelier.benchmarks.metrics.models import MetricInput, MetricResult
from atelier.benchmarks.metrics.statistics import DEFAULT_RESAMPLES, percentile_bootstrap


class PairwiseJudgement(MetricInput):
    """Model and human scores of reports A and B for one (query, criterion) pair."""

    query_id: str = Field(default="", description="Query identifier (informational).")
    criterion: str = Field(default="", description="Criterion identifier (informational).")
    model_a: FiniteFloat = Field(description="Model score of report A.")
    model_b: FiniteFloat = Field(description="Model score of report B.")
    human_a: FiniteFloat = Field(description="Human score of report A.")
    human_b: FiniteFloat = Field(description="Human score of report B.")


def pairwise_comparison_agreement(judgements: Sequence[PairwiseJudgement]) -> float:
    """PCA: share of (query, criterion) pairs where model and humans prefer the same report (or both tie)."""
    if not judgements:
        raise ValueError("PCA needs at least one (query, criterion) pair")
    agreeing = sum(1 for j in judgements if np.sign(j.model_a - j.model_b) == np.sign(j.human_a - j.human_b))
    return agreeing / len(judgements)


def mean_absolute_rating_deviation(judgements: Sequence[PairwiseJudgement]) -> float:
    """MARD: mean |model - human| over both reports of every (query, criterion) pair."""
    if not judgements:
        raise ValueError("MARD needs at least one (query, criterion) pair")
    deviations = [abs(j.model_a - j.human_a) + abs(j.model_b - j.human_b) for j in judgements]
    return math.fsum(deviations) / (2 * len(judgements))


class Correlation(MetricResult):
    statistic: float | None = Field(description="Correlation coefficient; None when undefined.")
    p_value: float | None = Field(description="Two-sided p-value; None when undefined.")


def pearson(x: Sequence[float], y: Sequence[float]) -> Correlation:
    return _correlation(x, y, stats.pearsonr)


def spearman(x: Sequence[float], y: Sequence[float]) -> Correlation:
    return _correlation(x, y, stats.spearmanr)


def _correlation(x: Sequence[float], y: Sequence[float], test: Callable[..., Any]) -> Correlation:
    if len(x) != len(y):
        raise ValueError(f"paired score lists differ in length: {len(x)} vs {len(y)}")
    # Fewer than two pairs, or a constant side, leaves the coefficient undefined (scipy would warn and give NaN).
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Correlation(statistic=None, p_value=None)
    result = test(x, y)
    return Correlation(statistic=_finite(result.statistic), p_value=_finite(result.pvalue))


def _finite(value: Any) -> float | None:
    """scipy's NaN (an undefined p-value, e.g. Spearman on two pairs) as None."""
    value = float(value)
    return value if math.isfinite(value) else None


class JudgeAgreementInput(MetricInput):
    judgements: list[PairwiseJudgement] = Field(
        min_length=1, description="One entry per (query, criterion) pair of reports A and B."
    )


class JudgeAgreementResult(MetricResult):
    n_pairs: int = Field(description="N, the number of (query, criterion) pairs.")
    pca: float = Field(description="Pairwise Comparison Agreement in [0, 1] (higher is better).")
    mard: float = Field(description="Mean Absolute Rating Deviation (lower is better).")
    pearson: Correlation = Field(description="Over all 2N (model, human) score pairs.")
    spearman: Correlation = Field(description="Over all 2N (model, human) score pairs.")


def judge_agreement(compared: JudgeAgreementInput) -> JudgeAgreementResult:
    judgements = compared.judgements
    model = [score for j in judgements for score in (j.model_a, j.model_b)]
    human = [score for j in judgements for score in (j.human_a, j.human_b)]
    return JudgeAgreementResult(
        n_pairs=len(judgements),
        pca=pairwise_comparison_agreement(judgements),
        mard=mean_absolute_rating_deviation(judgements),
        pearson=pearson(model, human),
        spearman=spearman(model, human),
    )


class CorrelationInput(MetricInput):
    x: list[FiniteFloat] = Field(min_length=1, description="First score list, e.g. the judge's scores.")
    y: list[FiniteFloat] = Field(min_length=1, description="Second score list, paired by position, e.g. human scores.")

    @model_validator(mode="after")
    def _same_length(self) -> CorrelationInput:
        if len(self.x) != len(self.y):
            raise ValueError(f"x and y must be paired: {len(self.x)} vs {len(self.y)} values")
        return self


class CorrelationResult(MetricResult):
    n: int
    pearson: Correlation
    spearman: Correlation


def correlations(paired: CorrelationInput) -> CorrelationResult:
    return CorrelationResult(
        n=len(paired.x), pearson=pearson(paired.x, paired.y), spearman=spearman(paired.x, paired.y)
    )


# --------------------------------------------------------------------------- meta-evaluation of a run


class LabelledScore(MetricInput):
    """One response's score on one criterion from the judge under test (`model`) and the labels (`human`)."""

    case_id: str
    system: str
    model: FiniteFloat
    human: FiniteFloat


class Interval(MetricResult):
    low: float | None = Field(description="Lower bound; None without data.")
    high: float | None = Field(description="Upper bound; None without data.")
    confidence: float
    n_resamples: int
    seed: int


class CriterionAgreement(MetricResult):
    n: int = Field(description="Responses scored by both.")
    n_pairs: int = Field(description="(case, response A, response B) pairs behind PCA.")
    pca: float | None = Field(description="PCA over every pair of responses to the same case; None without pairs.")
    pca_ci: Interval = Field(description="Percentile bootstrap CI of PCA, resampling the pairs (seeded).")
    mard: float | None = Field(description="Mean |model - human| over the responses, in the criterion's own units.")
    pearson: Correlation
    spearman: Correlation


def criterion_agreement(
    items: Sequence[LabelledScore], confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> CriterionAgreement:
    """PCA (with its bootstrap CI), MARD, Pearson and Spearman for one criterion — `items` must all be
    scores of that one criterion, on its one scale. PCA compares every two responses to the same case
    (PDR-Bench's A and B; with more than two systems, each pair of them); with two responses per case
    MARD equals Appendix C's formula, and in general it is the mean deviation over responses. The
    figures do not depend on the order of `items` (a label page and a CSV sheet give the same labels
    in different orders, and a correlation's last bits follow the order it sums in)."""
    items = sorted(items, key=lambda item: (item.case_id, item.system, item.model, item.human))
    by_case: dict[str, list[LabelledScore]] = {}
    for item in items:
        by_case.setdefault(item.case_id, []).append(item)
    pairs = [
        PairwiseJudgement(query_id=case, model_a=a.model, model_b=b.model, human_a=a.human, human_b=b.human)
        for case, scored in by_case.items()
        for i, a in enumerate(scored)
        for b in scored[i + 1 :]
    ]
    agreeing = sorted(float(np.sign(p.model_a - p.model_b) == np.sign(p.human_a - p.human_b)) for p in pairs)
    low, high = percentile_bootstrap(agreeing, confidence, n_resamples, seed)  # sorted: the same CI in any order
    model = [i.model for i in items]
    human = [i.human for i in items]
    return CriterionAgreement(
        n=len(items),
        n_pairs=len(pairs),
        pca=pairwise_comparison_agreement(pairs) if pairs else None,
        pca_ci=Interval(low=low, high=high, confidence=confidence, n_resamples=n_resamples, seed=seed),
        mard=math.fsum(abs(m - h) for m, h in zip(model, human)) / len(items) if items else None,
        pearson=pearson(model, human),
        spearman=spearman(model, human),
    )


class AverageAgreement(MetricResult):
    """BESPOKE Table 3's "Avg.": each figure is the mean of the per-criterion figures."""

    criteria: list[str] = Field(description="The criteria averaged.")
    pca: float | None
    pearson: float | None = Field(description="Mean of the per-criterion Pearson coefficients.")
    spearman: float | None = Field(description="Mean of the per-criterion Spearman coefficients.")
    undefined: dict[str, list[str]] = Field(
        default_factory=dict, description="Per figure, the criteria where it is undefined (left out of its mean)."
    )


def average_agreement(per_criterion: dict[str, CriterionAgreement]) -> AverageAgreement:
    """The mean of each figure over the criteria that define it; a criterion where it is undefined (a
    constant score list, no pair) is named under `undefined`, never counted as zero."""
    figures = {
        "pca": {name: a.pca for name, a in per_criterion.items()},
        "pearson": {name: a.pearson.statistic for name, a in per_criterion.items()},
        "spearman": {name: a.spearman.statistic for name, a in per_criterion.items()},
    }
    means = {}
    undefined = {}
    for figure, values in figures.items():
        defined = [v for v in values.values() if v is not None]
        means[figure] = math.fsum(defined) / len(defined) if defined else None
        missing = [name for name, v in values.items() if v is None]
        if missing:
            undefined[figure] = missing
    return AverageAgreement(criteria=list(per_criterion), undefined=undefined, **means)


def feedback_accuracy(equivalent: Sequence[bool]) -> float | None:
    """BESPOKE's feedback alignment: the share of generated feedbacks judged equivalent to the human's."""
    return sum(equivalent) / len(equivalent) if equivalent else None
