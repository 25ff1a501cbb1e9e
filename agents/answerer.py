"""The answerer: one LLM call that answers the query from the user's context (no search).

Its prompts follow LaMP-QA's personalised-generation prompts (Figures 13-15): the user's context
stands in for their past posts; with no context it is the non-personalised baseline; given a plan
(PlanPers), the answer also covers the aspects the planner expects this user to want.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.models.gateway import Gateway
from agents.prompts import Section, build_messages, user_sections
from agents.response import SystemResponse
from benchmarks.case import CaseView

ROLE = (
    "You are a helpful assistant designed to generate personalized responses to user questions. "
    "You tailor what you say and how you say it to the user you are answering."
)
TASK_PERSONALIZED = (
    "Answer the user's current question in a personalized way: learn the user's preferences, "
    "situation and level of expertise from what you know about them, and let them shape the content, "
    "depth, tone and format of your answer. Do not mention that you were given a profile."
)
TASK_PLAIN = "Answer the user's current question as helpfully and completely as you can."
TASK_PLAN = (
    " You are also given the aspects this user expects to see in the response: cover each of them, "
    "in the order and depth that suits this user."
)


def answer_messages(view: CaseView, context_text: str, plan: Sequence[str] = ()) -> list[dict[str, str]]:
    sections = user_sections(view.query, context_text)
    task = TASK_PERSONALIZED if context_text else TASK_PLAIN
    if plan:
        sections.append(Section("Aspects expected in the response", "\n".join(f"- {a}" for a in plan)))
        task += TASK_PLAN
    return build_messages(ROLE, sections, task)


async def answer(
    gateway: Gateway, view: CaseView, context_text: str, role: str = "system", plan: Sequence[str] = ()
) -> SystemResponse:
    text = await gateway.text(role, answer_messages(view, context_text, plan))
    return SystemResponse(text=text)
