"""Clarification answers: the simulated user answers a system's clarifying questions.

Only what is asked, from the persona and the hidden need; "I don't know" rather than an invented
fact; the reply ends with the stop token (nothing to add). The model marks each answer known or
not; the code holds it to that: an unknown or empty answer becomes exactly "I don't know", every
question gets exactly one answer in order, and no gold text leaves (`GoldGuard`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints, create_model

from atelier.agents.clarify import DONT_KNOW, ClarifyAnswers, ClarifyRequest
from atelier.agents.models.budgeted import at_most
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.user_sim.disclosure import GoldGuard
from atelier.agents.user_sim.grounding import SIMULATOR_ROLE, STOP_TOKEN, user_sections
from atelier.benchmarks.case import Case

TASK = (
    "The assistant asks you the clarifying questions above before it starts working on your question. "
    "Answer each one, as yourself:\n"
    "- answer only what that question asks, in one or two sentences;\n"
    f"- when 'Who you are' and 'What you are looking for' do not settle it, set known to false and answer "
    f"'{DONT_KNOW}' — never guess or invent;\n"
    "- give one answer per question, numbered like the questions."
)


class QuestionAnswer(BaseModel):
    question: int = Field(description="The number of the question answered (1 for the first).")
    known: bool = Field(description="Whether what you know settles this question.")
    answer: str = Field(description=f"Your answer, or '{DONT_KNOW}'.")


class ClarifyReply(BaseModel):
    answers: list[QuestionAnswer]


ANSWER_CHARS = 300  # "one or two sentences"


class BoundedAnswer(QuestionAnswer):
    answer: Annotated[str, StringConstraints(max_length=ANSWER_CHARS)] = Field(
        description=f"Your answer, or '{DONT_KNOW}'."
    )


@functools.cache  # one class per number of questions: the gateway builds each class's JSON schema once
def _reply_model(questions: int) -> type[ClarifyReply]:
    """The reply with at most one answer per question and answers of bounded length, in its schema:
    a grammar-held weak model otherwise goes on listing answers (or one answer) to its max_tokens."""
    return create_model("ClarifyReply", __base__=ClarifyReply, answers=at_most(BoundedAnswer, questions))


@dataclass(frozen=True)
class SimulatedAnswers:
    """The simulator's reply: the typed resume value, and how it was arrived at."""

    answers: ClarifyAnswers
    unknown: int  # questions answered "I don't know"
    redacted: int  # gold spans cut by the guard
    questions: list[str] = field(default_factory=list)

    def transcript(self) -> str:
        lines = [f"{i}. {q}\n   -> {a}" for i, (q, a) in enumerate(zip(self.questions, self.answers.answers), start=1)]
        return "\n".join(lines + [STOP_TOKEN])


def clarify_messages(case: Case, questions: list[str]) -> list[dict[str, str]]:
    numbered = "\n".join(f"{i}. {q}" for i, q in enumerate(questions, start=1))
    sections = [*user_sections(case), Section("The assistant's clarifying questions", numbered, untrusted=True)]
    return build_messages(SIMULATOR_ROLE, sections, TASK)


async def answer_clarification(
    gateway: Gateway, case: Case, request: ClarifyRequest, role: str = "user_sim", guard: GoldGuard | None = None
) -> SimulatedAnswers:
    questions = [q.strip() for q in request.questions]
    reply = await gateway.structured(role, clarify_messages(case, questions), _reply_model(len(questions)))
    guard = guard or GoldGuard(case)
    by_number: dict[int, QuestionAnswer] = {}
    for given in reply.answers:
        by_number.setdefault(given.question, given)  # a repeated number: the first answer counts
    answers: list[str] = []
    unknown = redacted = 0
    for number in range(1, len(questions) + 1):
        item = by_number.get(number)
        text = item.answer.replace(STOP_TOKEN, "").strip() if item is not None and item.known else ""
        if text:
            scrubbed = guard.scrub(text, also_shared=questions)
            text, redacted = scrubbed.text, redacted + scrubbed.redacted
        if not text.strip(" .…"):
            text = DONT_KNOW
        unknown += text == DONT_KNOW
        answers.append(text)
    return SimulatedAnswers(ClarifyAnswers(answers=answers), unknown=unknown, redacted=redacted, questions=questions)
