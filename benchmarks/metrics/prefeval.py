"""PrefEval preference following (Zhao et al., ICLR 2025), from its four LLM checks, as its official
code classifies them (amazon-science/PrefEval,
`generation_task/get_preference_following_accuracy_generation_task.py`):

- acknowledgement: the response mentions or assumes a user preference;
- hallucination (asked only when acknowledged): the restated preference is not the user's;
- violation: the response recommends against the preference without acknowledging it or saying why;
- helpfulness: the response gives a substantive answer (no apology for lacking memory, no bare
  request for more information).

Error types (each requires a helpful response, except "unhelpful" itself):
    unhelpful                   not helpful
    inconsistent                acknowledged, not hallucinated, violated
    hallucinated_violation      acknowledged, hallucinated, violated
    unaware_violation           not acknowledged, violated
The response follows the preference when it has none of these errors.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field, model_validator

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

ErrorType = Literal["unhelpful", "inconsistent", "hallucinated_violation", "unaware_violation"]
ERROR_TYPES: tuple[ErrorType, ...] = ("unhelpful", "inconsistent", "hallucinated_violation", "unaware_violation")


class PreferenceChecks(MetricInput):
    acknowledges: bool = Field(description="The response acknowledges a user preference.")
    hallucinates: bool = Field(
        default=False, description="The restated preference is not the user's (only judged when acknowledged)."
    )
    violates: bool = Field(description="The response violates the stated preference.")
    helpful: bool = Field(description="The response gives a substantive answer.")

    @model_validator(mode="after")
    def _hallucination_needs_acknowledgement(self) -> PreferenceChecks:
        if self.hallucinates and not self.acknowledges:
            raise ValueError(
                "hallucinates=true needs acknowledges=true: only a restated preference can be hallucinated"
            )
        return self


class PreferenceVerdict(MetricResult):
    follows: bool = Field(description="Preference followed: none of the error types.")
    error: ErrorType | None = Field(description="The error type, when there is one.")


def preference_verdict(checks: PreferenceChecks) -> PreferenceVerdict:
    unhelpful = not checks.helpful
    if unhelpful:
        error: ErrorType | None = "unhelpful"
    elif checks.acknowledges and checks.violates:
        error = "hallucinated_violation" if checks.hallucinates else "inconsistent"
    elif checks.violates:
        error = "unaware_violation"
    else:
        error = None
    return PreferenceVerdict(follows=error is None, error=error)


class PrefEvalInput(MetricInput):
    items: list[PreferenceChecks] = Field(min_length=1, description="The four checks of each judged response.")


class PrefEvalResult(MetricResult):
    n: int
    accuracy: float = Field(description="Share of responses that follow the preference.")
    errors: dict[str, int] = Field(description="Count per error type.")
    acknowledgement_rate: float
    violation_rate: float


def prefeval_scores(judged: PrefEvalInput) -> PrefEvalResult:
    verdicts = [preference_verdict(item) for item in judged.items]
    n = len(verdicts)
    counts = Counter(v.error for v in verdicts if v.error)
    return PrefEvalResult(
        n=n,
        accuracy=sum(v.follows for v in verdicts) / n,
        errors={name: counts.get(name, 0) for name in ERROR_TYPES},
        acknowledgement_rate=sum(i.acknowledges for i in judged.items) / n,
        violation_rate=sum(i.violates for i in judged.items) / n,
    )
