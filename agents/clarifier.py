"""The clarifier: decides whether to ask the user anything before researching, and what.

It sees what the system knows about the user, so it asks only what that context leaves open
(the PDR-Bench setting: personalization starts from what the memory already holds).
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, Field, create_model

from atelier.agents.models.budgeted import ShortItem, at_most
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import build_messages, user_sections
from atelier.benchmarks.case import Query

ROLE = (
    "You are the research lead of a personal research assistant. Before a research task starts, you decide "
    "whether a short clarifying question to the user would change what is researched or how the report is written."
)


class ClarifyDecision(BaseModel):
    """What callers read of `_clarify_decision_model`'s answers."""

    need_clarification: bool
    questions: list[str]


@functools.cache  # one class per budget: the gateway builds each class's JSON schema once
def _clarify_decision_model(max_questions: int, always: bool = False) -> type[ClarifyDecision]:
    """The clarifier's answer, its question budget in the schema (`agents.models.budgeted`)."""
    return create_model(
        "ClarifyDecision",
        __base__=ClarifyDecision,
        need_clarification=(
            bool,
            Field(description="True only when an answer would change the research or the report."),
        ),
        questions=at_most(
            ShortItem,
            max_questions,
            min_items=1 if always else 0,
            description="Short, specific questions; empty if none is needed.",
        ),
    )


_ASK_WHAT = (
    "Ask only about what matters for this task and is not already answered by what you know about the user "
    "(their situation, constraints, preferences, expertise). Do not ask about things you could look up."
)


def clarify_messages(
    query: Query, context_text: str, max_questions: int, *, always: bool = False
) -> list[dict[str, str]]:
    if always:
        task = (
            f"Ask the user between 1 and {max_questions} clarifying question(s) before researching, "
            f"the ones whose answers would improve the report most. {_ASK_WHAT} Set need_clarification to true."
        )
    else:
        task = (
            f"Decide whether to ask the user up to {max_questions} clarifying question(s) before researching. "
            f"{_ASK_WHAT} If the task is clear enough, set need_clarification to false and leave the "
            "questions empty."
        )
    return build_messages(ROLE, user_sections(query, context_text), task)


async def decide_clarification(
    gateway: Gateway,
    query: Query,
    context_text: str,
    max_questions: int,
    *,
    always: bool = False,
    role: str = "clarifier",
) -> list[str]:
    """The questions to ask (at most `max_questions`; empty when none is needed, unless `always`)."""
    messages = clarify_messages(query, context_text, max_questions, always=always)
    decision = await gateway.structured(role, messages, _clarify_decision_model(max_questions, always))
    if not (decision.need_clarification or always):
        return []
    return [q.strip() for q in decision.questions if q.strip()]
