"""The clarify interrupt's typed payload and resume value (deep_research's clarify step).

The graph calls `interrupt(ClarifyRequest(questions=[...]))`; whoever answers — a person in
Studio or the simulated user in runs — resumes it with `ClarifyAnswers(answers=[...])`, one
answer per question ("I don't know" allowed).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ClarifyRequest(BaseModel):
    questions: list[str] = Field(description="What the system asks the user before researching.")


class ClarifyAnswers(BaseModel):
    answers: list[str] = Field(description="One answer per question, in order.")
