"""The answerer: one LLM call that answers the query from the user's context (no search).

Its prompt follows LaMP-QA's personalised-generation prompts (Figures 13 and 14): the user's
context stands in for their past posts; with no context it is the non-personalised baseline.
"""

from __future__ import annotations

from agents.gateway import Gateway
from agents.prompts import Section, build_messages, conversation_section
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


def answer_messages(view: CaseView, context_text: str) -> list[dict[str, str]]:
    sections: list[Section] = []
    if context_text:
        sections.append(Section("What you know about the user", context_text, untrusted=True))
    if view.query.previous_turns:
        sections.append(conversation_section(view.query.previous_turns))
    sections.append(Section("The user's current question", view.query.text))
    return build_messages(ROLE, sections, TASK_PERSONALIZED if context_text else TASK_PLAIN)


async def answer(gateway: Gateway, view: CaseView, context_text: str, role: str = "system") -> SystemResponse:
    text = await gateway.text(role, answer_messages(view, context_text))
    return SystemResponse(text=text)
