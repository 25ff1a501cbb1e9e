"""The input an external deep-research agent gets: the task and what is known about the user.

PDR-Bench ran the agents it compared (Table 1) with the task and the user's persona or context
given together in the agent's input; this does the same with whatever the system's memory
backend recalled, so every memory backend pairs with every external agent. With no context it
is PDR-Bench's "task only" condition.
"""

from __future__ import annotations

from atelier.agents.prompts import Section, conversation_section
from atelier.benchmarks.case import CaseView

TASK_PERSONALIZED = (
    "Research this task and write a report for this user. Let what you know about them (their goals, "
    "situation, expertise and preferences) decide the report's focus, depth, examples and style. "
    "Cite the sources you used by URL."
)
TASK_PLAIN = "Research this task and write a report on it. Cite the sources you used by URL."


def agent_brief(view: CaseView, context_text: str) -> str:
    sections = [Section("Research task", view.query.text)]
    if view.query.previous_turns:
        sections.append(conversation_section(view.query.previous_turns))
    if context_text.strip():
        sections.append(Section("What you know about the user", context_text))
    task = TASK_PERSONALIZED if context_text.strip() else TASK_PLAIN
    return "\n\n".join([s.render() for s in sections] + [f"# Instructions\n{task}"])
