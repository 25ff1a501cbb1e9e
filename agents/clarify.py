"""The clarify exchange between a system under test and its user (deep_research's clarify step).

The system calls LangGraph `interrupt(ClarifyRequest(questions=[...]))`; whoever answers — a
person in LangGraph Studio, or the simulated user in a run — resumes it with
`ClarifyAnswers(answers=[...])`, one answer per question, in order. "I don't know" is a valid
answer. These types live in `agents/` so the simulated user can use them without `graphs/`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DONT_KNOW = "I don't know"


class ClarifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[str] = Field(min_length=1, description="What the system asks before it starts researching.")
    problem: str | None = Field(
        default=None,
        description="Why the previous answer could not be used, when this is the same question asked again.",
    )


class ClarifyAnswers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answers: list[str] = Field(description='One answer per question, in order; "I don\'t know" is allowed.')

    def aligned(self, request: ClarifyRequest) -> list[tuple[str, str]]:
        """(question, answer) pairs; a question left unanswered counts as "I don't know".
        More answers than questions is an error naming both counts."""
        if len(self.answers) > len(request.questions):
            raise ValueError(
                f"{len(self.answers)} answers for {len(request.questions)} questions: give one answer per question"
            )
        answers = [a.strip() or DONT_KNOW for a in self.answers]
        answers += [DONT_KNOW] * (len(request.questions) - len(answers))
        return list(zip(request.questions, answers))
