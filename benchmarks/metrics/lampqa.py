"""LaMP-QA aspect-based score (Algorithm 1 of the LaMP-QA paper).

The judge rates how well the response addresses each rubric aspect extracted from the user's question
narrative on a 0-2 scale (0 not covered, 1 somewhat, 2 very well); each rating is divided by 2 and the
response's score is the mean over all aspects, so it lies in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from benchmarks.metrics.models import MetricInput, MetricResult

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
