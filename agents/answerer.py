"""The answerer: one LLM call that answers the query from the user's context (no search).

Its prompts follow LaMP-QA's personalised-generation prompts (Figures 13-15): the user's context
stands in for their past posts; with no context it is the non-personalised baseline; given a plan
(PlanPers), the answer also covers the aspects the planner expects this user to want.

`recall_before_answering` is an answer step offered a memory tool (`recall_memory(query)`): in
turns, the model calls it for what it wants to know about the user, sees what came back, and stops
when it knows enough or its budget of calls is spent; the caller then answers with what was
recalled. Each turn is a structured `ToolTurn` (agents/models/tool_calls.py), so every model the
gateway can hold to JSON — the scripted model, the stub server, the local model — can call it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.tool_calls import schema_model, tool_turn_schema
from atelier.agents.prompts import Section, build_messages, user_sections
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import CaseView, Query
from atelier.benchmarks.common.degradation import Degradation, degradation

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
TASK_RESEARCH = " Research the question on the web first, and cite the sources you rely on."
TASK_PLAN = (
    " You are also given the aspects this user expects to see in the response: cover each of them, "
    "in the order and depth that suits this user."
)


def answer_messages(
    view: CaseView, context_text: str, plan: Sequence[str] = (), *, research: bool = False
) -> list[dict[str, str]]:
    """`research`: for a model that searches the web itself (a deep-research API), asked to research and cite."""
    sections = user_sections(view.query, context_text)
    task = TASK_PERSONALIZED if context_text else TASK_PLAIN
    if research:
        task += TASK_RESEARCH
    if plan:
        sections.append(Section("Aspects expected in the response", "\n".join(f"- {a}" for a in plan)))
        task += TASK_PLAN
    return build_messages(ROLE, sections, task)


async def answer(
    gateway: Gateway, view: CaseView, context_text: str, role: str = "system", plan: Sequence[str] = ()
) -> SystemResponse:
    text = await gateway.text(role, answer_messages(view, context_text, plan))
    return SystemResponse(text=text)


RECALL_ROLE = (
    "You are about to answer one specific user's question. Before you answer, you can look up what a memory "
    "holds about this user (their past conversations, situation, preferences, what they already know) with a "
    "tool, so that your answer fits them."
)


class Lookup(BaseModel):
    """One call of the memory tool: what was asked, and what it gave (the text the model saw)."""

    query: str
    result: str


class Recalled(BaseModel):
    """What an answer step looked up before answering."""

    lookups: list[Lookup] = Field(default_factory=list)
    turns: int = Field(default=0, description="Model turns asked whether to look something up.")
    degraded: list[Degradation] = Field(default_factory=list)


def recall_turn_messages(
    query: Query,
    context_text: str,
    tool_name: str,
    lookups: Sequence[Lookup],
    remaining: int,
    material: Sequence[Section] = (),
) -> list[dict[str, str]]:
    sections = user_sections(query, context_text) + list(material)
    if lookups:
        found = "\n\n".join(
            f"{tool_name}({lookup.query!r}) gave:\n{lookup.result.strip() or '(nothing)'}" for lookup in lookups
        )
        sections.append(Section("What you looked up about the user so far", found, untrusted=True))
    task = (
        "Decide whether you need to know more about this user to answer their current question well. To look "
        f"something up, call {tool_name} with a short query naming what you want to know about them (one call "
        f"per thing, at most {remaining} more; do not repeat a query). If what you know is enough, call no tool "
        "(an empty tool_calls list). Do not answer the question here: the answer is written next, from what you "
        "looked up."
    )
    return build_messages(RECALL_ROLE, sections, task)


def _echoes(text: str, tool: dict[str, Any]) -> bool:
    """Whether a query only repeats a description in the tool's spec (what a weak model fills in)."""
    function = tool.get("function", tool)
    properties = (function.get("parameters") or {}).get("properties") or {}
    described = [function.get("description"), *(p.get("description") for p in properties.values())]
    words = " ".join(text.split()).strip(" .").casefold()
    return bool(words) and any(words == " ".join(str(d).split()).strip(" .").casefold() for d in described if d)


async def recall_before_answering(
    gateway: Gateway,
    query: Query,
    context_text: str,
    tool: dict[str, Any],
    recall: Callable[[str], Awaitable[str]],
    max_calls: int,
    *,
    material: Sequence[Section] = (),
    role: str = "writer",
    step: str = "answer",
) -> Recalled:
    """Offer the memory tool `tool` (an OpenAI function tool taking `query`) to the model, in turns,
    until it calls none, calls only queries it has asked before, or `max_calls` are made; `recall`
    serves each call (its text is what the model sees next). A failed turn ends the lookups, recorded
    as a `step_fallback` at `step`: the answer goes on with what was recalled so far. A query that
    only repeats a description of the tool's spec is replaced by the user's question (`invalid_query`)."""
    name = str(tool.get("function", tool).get("name"))
    turn_model = schema_model("ToolTurn", tool_turn_schema([tool]))
    out = Recalled()
    asked: set[str] = set()
    while len(out.lookups) < max_calls:
        remaining = max_calls - len(out.lookups)
        messages = recall_turn_messages(query, context_text, name, out.lookups, remaining, material)
        out.turns += 1
        try:
            turn = (await gateway.structured(role, messages, turn_model)).root
        except ModelCallError as exc:
            out.degraded.append(
                degradation("step_fallback", step, f"{name} turn (answering with what was recalled so far): {exc}")
            )
            break
        wanted = [" ".join(str(call.get("arguments", {}).get("query", "")).split()) for call in turn["tool_calls"]]
        for index, text in enumerate(wanted):
            if _echoes(text, tool):  # a weak model copies the schema: ask the memory the question instead
                wanted[index] = " ".join(query.text.split())[:300]
                out.degraded.append(
                    degradation(
                        "invalid_query",
                        step,
                        f"{name} query {text!r} echoes the tool's description: the question stood in",
                    )
                )
        new: list[str] = []
        for text in wanted:  # each query once (case aside), within the budget
            if text and text.casefold() not in asked and len(new) < remaining:
                asked.add(text.casefold())
                new.append(text)
        if not new:
            break
        results = await asyncio.gather(*(recall(text) for text in new))  # one turn's calls run together
        out.lookups += [Lookup(query=text, result=result) for text, result in zip(new, results)]
    return out
