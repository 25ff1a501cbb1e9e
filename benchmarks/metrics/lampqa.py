"""LaMP-QA scores: the aspect-based score (Algorithm 1) and its two alternatives (Appendix C).

Aspect-based: the judge rates how well the response addresses each rubric aspect extracted from the
user's question narrative on a 0-2 scale (0 not covered, 1 somewhat, 2 very well); each rating is
divided by 2 and the response's score is the mean over all aspects, so it lies in [0, 1].
Direct: one score for the whole response on five levels, 0, 0.25, 0.5, 0.75, 1 (Figure 10).
Pairwise: the judge picks response_1, response_2 or tie (Figure 11); run in both orders, the two
verdicts give a position-balanced outcome and show whether swapping the order flipped the verdict
(the paper reports 78% flips for Qwen 2.5 32B).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

MAX_ASPECT_SCORE = 2.0


def lampqa_score(aspect_scores: Sequence[float]) -> float:
    """Mean of aspect_score / 2 over the rubric aspects."""
    if not aspect_scores:
        raise ValueError("a LaMP-QA score needs at least one rubric aspect")
    for position, score in enumerate(aspect_scores):
        if not 0 <= score <= MAX_ASPECT_SCORE:
            raise ValueError(f"aspect #{position + 1} score must be in [0, 2], got {score}")
    return math.fsum(score / MAX_ASPECT_SCORE for score in aspect_scores) / len(aspect_scores)


class AspectRating(MetricInput):
    aspect: str = Field(default="", description="The rubric aspect title (informational).")
    score: float = Field(ge=0, le=MAX_ASPECT_SCORE, description="Judge rating: 0 not covered, 1 somewhat, 2 very well.")


class LampQAInput(MetricInput):
    aspects: list[AspectRating] = Field(min_length=1, description="One rating per rubric aspect of the question.")


class LampQAResult(MetricResult):
    score: float = Field(description="Mean normalised aspect score in [0, 1].")
    normalized: list[float] = Field(description="Each aspect's rating divided by 2, in input order.")


def lampqa_scores(judged: LampQAInput) -> LampQAResult:
    ratings = [a.score for a in judged.aspects]
    return LampQAResult(score=lampqa_score(ratings), normalized=[r / MAX_ASPECT_SCORE for r in ratings])


# --------------------------------------------------------------------------- direct score (Figure 10)

DIRECT_LEVELS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)


def check_direct_level(score: float) -> float:
    """The aspect-free judge scores on five levels, 0 to 1 in steps of 0.25 (Appendix C)."""
    if score not in DIRECT_LEVELS:
        raise ValueError(f"a LaMP-QA direct score must be one of {', '.join(map(str, DIRECT_LEVELS))}, got {score}")
    return float(score)


# --------------------------------------------------------------------------- pairwise (Figure 11)

PairwiseVerdict = Literal["response_1", "response_2", "tie"]


def candidate_outcome(verdict: PairwiseVerdict, candidate_first: bool) -> float:
    """1 when the candidate won, 0 when the other response won, 0.5 for a tie."""
    if verdict == "tie":
        return 0.5
    return 1.0 if (verdict == "response_1") == candidate_first else 0.0


class PairwiseOutcome(MetricResult):
    outcome_first: float = Field(
        description="The candidate's outcome when shown as response 1 (1 win, 0.5 tie, 0 loss)."
    )
    outcome_swapped: float = Field(description="The candidate's outcome when shown as response 2.")
    score: float = Field(description="Mean of both orders: the position-balanced win score in [0, 1].")
    flipped: bool = Field(description="Swapping the order changed the verdict.")


def pairwise_outcome(first: PairwiseVerdict, swapped: PairwiseVerdict) -> PairwiseOutcome:
    """One candidate against a baseline judged in both orders: the candidate as response 1 (`first`),
    then as response 2 (`swapped`). The verdict flips when the two orders disagree about who is better
    (a judge that always picks the same position flips on every pair)."""
    a = candidate_outcome(first, candidate_first=True)
    b = candidate_outcome(swapped, candidate_first=False)
    return PairwiseOutcome(outcome_first=a, outcome_swapped=b, score=(a + b) / 2, flipped=a != b)


class PairwiseJudged(MetricInput):
    first: PairwiseVerdict = Field(description="Verdict with the candidate shown as response 1.")
    swapped: PairwiseVerdict = Field(description="Verdict with the candidate shown as response 2.")


class PairwiseInput(MetricInput):
    pairs: list[PairwiseJudged] = Field(min_length=1, description="One entry per (question, candidate vs baseline).")


class PairwiseSummary(MetricResult):
    n: int
    win_rate: float = Field(description="Mean position-balanced score of the candidate (ties count 0.5).")
    flip_rate: float = Field(description="Share of pairs whose verdict changed when the order was swapped.")


def pairwise_summary(judged: PairwiseInput) -> PairwiseSummary:
    outcomes = [pairwise_outcome(p.first, p.swapped) for p in judged.pairs]
    return PairwiseSummary(
        n=len(outcomes),
        win_rate=math.fsum(o.score for o in outcomes) / len(outcomes),
        flip_rate=sum(o.flipped for o in outcomes) / len(outcomes),
    )
