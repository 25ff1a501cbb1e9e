"""BESPOKE scores: the four personalization criteria on a 0-100 scale and gold-information recall.

The judge rates need alignment, content depth, tone and explanation style on an integer 1-5 Likert
scale; BESPOKE reports them "on a 0-100 scale by multiplying raw 1-5 Likert ratings by 20" (Sec. 4),
so 1 -> 20 and 5 -> 100 (not a min-max rescaling). Gold-information recall is |I_r| / |I_q+|: the
share of gold atomic claims judged present in the response without contradiction (Sec. 3.4), shown
in the paper's Table 4 as a percentage. The table's "Avg." is the mean of the four scaled criteria and
recall in percent (e.g. pplx-sonar: (45.20 + 47.47 + 80.53 + 56.53 + 9.87) / 5 = 47.92).

A query whose gold information list is empty scores recall 0.0, following BESPOKE's official code
(the paper itself is silent); `empty_gold` marks such a result so a summary can count them. `gold_information = null` means recall was not judged at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

BESPOKE_CRITERIA: tuple[str, ...] = ("need_alignment", "content_depth", "tone", "explanation_style")
LIKERT_MIN, LIKERT_MAX = 1, 5
LIKERT_TO_PERCENT = 20


def likert_to_percent(score: int) -> float:
    """A 1-5 Likert rating on BESPOKE's 0-100 scale (x 20)."""
    if not LIKERT_MIN <= score <= LIKERT_MAX:
        raise ValueError(f"a BESPOKE rating must be an integer from 1 to 5, got {score}")
    return float(score * LIKERT_TO_PERCENT)


def gold_information_recall(present: Sequence[bool]) -> float:
    """Share of gold information items judged present in the response; 0.0 for an empty gold list."""
    if not present:
        return 0.0
    return sum(1 for item in present if item) / len(present)


class BespokeRatings(MetricInput):
    """The judge's 1-5 rating per BESPOKE criterion (integers only, as the paper's judge prompt requires)."""

    need_alignment: int = Field(ge=LIKERT_MIN, le=LIKERT_MAX, description="Need alignment, 1-5.")
    content_depth: int = Field(ge=LIKERT_MIN, le=LIKERT_MAX, description="Content depth, 1-5.")
    tone: int = Field(ge=LIKERT_MIN, le=LIKERT_MAX, description="Tone, 1-5.")
    explanation_style: int = Field(ge=LIKERT_MIN, le=LIKERT_MAX, description="Explanation style, 1-5.")


class GoldInformationCheck(MetricInput):
    claim: str = Field(default="", description="The gold atomic claim (informational).")
    present: bool = Field(description="Whether the claim is correctly expressed in the response.")


class BespokeInput(MetricInput):
    ratings: BespokeRatings = Field(description="The judge's 1-5 rating per criterion.")
    gold_information: list[GoldInformationCheck] | None = Field(
        default=None,
        description="Judged gold information items; null when recall was not judged, [] for an empty gold list "
        "(recall 0.0).",
    )


class BespokeResult(MetricResult):
    criteria: dict[str, float] = Field(description="Each criterion on the 0-100 scale.")
    personalization: float = Field(description="Mean of the four scaled criteria.")
    recall: float | None = Field(description="Gold-information recall in [0, 1]; None when not judged.")
    empty_gold: bool = Field(default=False, description="The gold information list was empty (recall 0.0).")
    average: float | None = Field(description="Mean of the four scaled criteria and 100 x recall (Table 4 'Avg.').")


def bespoke_scores(judged: BespokeInput) -> BespokeResult:
    criteria = {name: likert_to_percent(getattr(judged.ratings, name)) for name in BESPOKE_CRITERIA}
    personalization = math.fsum(criteria.values()) / len(criteria)
    gold = judged.gold_information
    recall = gold_information_recall([item.present for item in gold]) if gold is not None else None
    average = (math.fsum(criteria.values()) + 100 * recall) / (len(criteria) + 1) if recall is not None else None
    return BespokeResult(
        criteria=criteria, personalization=personalization, recall=recall, empty_gold=gold == [], average=average
    )
