"""deep_research's agentic design: a supervisor and researchers that choose their own tools.

As in open_deep_research, the supervisor calls `conduct_research(topic)` (researchers in
parallel), `think(reflection)` and `research_complete()`; each researcher is a ReAct loop over
`search(query)`, `read(url)` and `think(reflection)` (and `recall_memory(query)` when the system
reads memory through a tool), and ends by compressing its notes into fewer notes, each tied by
code to the source it came from.

A turn is asked through the gateway's structured output as a `ToolTurn` (agents/models/tool_calls.py):
some text and zero or more calls of the offered tools with valid arguments. Every model that can
answer JSON can so call tools (the scripted model, the stub server, the local model), and each
turn goes through the same cache, retries, repair and ledger as any other call.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, create_model

from atelier.agents.models.budgeted import at_most
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.tool_calls import TOOL_TURN_NOTE, flatten_messages, schema_model, tool_turn_schema
from atelier.agents.prompts import Section, build_messages


def _tool(name: str, description: str, **arguments: str) -> dict[str, Any]:
    properties = {
        key: {"type": "string", "minLength": 1, "maxLength": 300, "description": about}
        for key, about in arguments.items()
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(arguments),
                "additionalProperties": False,
            },
        },
    }


THINK = _tool(
    "think",
    "Reflect on what you have found, what is missing and what to do next. Changes nothing.",
    reflection="Your reflection, in a few sentences.",
)
CONDUCT_RESEARCH = _tool(
    "conduct_research",
    "Have a researcher research one sub-topic on the web. Researchers called in the same turn work in "
    "parallel; each returns its notes, tied to the sources it read.",
    topic="The sub-topic, self-contained: what to find out and why it matters to this user.",
)
RESEARCH_COMPLETE = _tool("research_complete", "Say that the research is done and the report can be written.")
SEARCH = _tool("search", "Search the web. Returns result titles and URLs.", query="A web search query (not a URL).")
READ = _tool(
    "read",
    "Read one page found by your searches and take notes from it. Returns the notes, with the page's source id.",
    url="The URL of a search result.",
)

SUPERVISOR_TOOLS = [CONDUCT_RESEARCH, THINK, RESEARCH_COMPLETE]


def researcher_tools(unread: Sequence[str], extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The researcher's tools now: `read` only once a search found pages not yet read, and then only
    those URLs (an enum: a model cannot read a page no search found, nor invent a URL)."""
    tools = [SEARCH, THINK, *extra]
    if unread:
        read = json.loads(json.dumps(READ))
        read["function"]["parameters"]["properties"]["url"]["enum"] = list(unread)
        tools.insert(1, read)
    return tools


SUPERVISOR_ROLE = (
    "You are the research lead of a personal research assistant. You direct researchers for one specific user: "
    "their situation, constraints and preferences decide what is worth finding out. You never research yourself: "
    "you hand sub-topics to researchers and judge what they bring back."
)
RESEARCHER_ROLE = (
    "You are a careful researcher working for one specific user. You research one sub-topic on the web with your "
    "tools: search, read the most promising results, and stop when your notes answer the sub-topic for this user."
)


class ToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolTurnAnswer(BaseModel):
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


@functools.lru_cache(maxsize=512)
def _turn_model(tools_json: str, forced: str | None) -> type[BaseModel]:
    tools = json.loads(tools_json)
    choice: Any = {"type": "function", "function": {"name": forced}} if forced else "auto"
    return schema_model("ToolTurn", tool_turn_schema(tools, choice))


async def tool_turn(
    gateway: Gateway,
    role: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    forced: str | None = None,
) -> ToolTurnAnswer:
    """One assistant turn over OpenAI-style `messages` (tool calls and results included): the
    calls it makes of `tools` (`forced`: at least one call of that tool)."""
    model = _turn_model(json.dumps(list(tools), sort_keys=True), forced)
    asked = flatten_messages(list(messages)) + [{"role": "user", "content": TOOL_TURN_NOTE}]
    answer = await gateway.structured(role, asked, model)
    return ToolTurnAnswer.model_validate(answer.model_dump())


def supervisor_messages(brief: str, form: str, max_researchers: int, max_rounds: int) -> list[dict[str, Any]]:
    task = (
        f"Lead the research that answers this brief for this user. Call conduct_research once per sub-topic (at "
        f"most {max_researchers} in one turn; they run in parallel and should not overlap), read what the "
        f"researchers bring back, think about what is still missing, and research again (at most {max_rounds} "
        "rounds in all). Call research_complete when the notes answer what the report must cover."
    )
    return build_messages(
        SUPERVISOR_ROLE,
        [Section("Research brief", brief), Section("How the report should read for this user", form)],
        task,
    )


def researcher_messages(topic: str, max_calls: int, with_memory: bool) -> list[dict[str, Any]]:
    memory = " Call recall_memory to look up what you need to know about the user." if with_memory else ""
    task = (
        f"Research the sub-topic for this user. Search with queries that use the user's specifics, read the "
        f"results that fit them best, and stop calling tools when your notes answer the sub-topic. You have "
        f"{max_calls} tool calls in all.{memory}"
    )
    return build_messages(RESEARCHER_ROLE, [Section("Sub-topic", topic)], task)


class CompressedNote(BaseModel):
    source: int = Field(description="The number of the source the note comes from.")
    text: str = Field(description="One self-contained fact, with its numbers, names and conditions.")


@functools.cache
def _compressed_model(max_notes: int, sources: int) -> type[BaseModel]:
    note = create_model(
        "CompressedNote",
        __base__=CompressedNote,
        source=(int, Field(ge=1, le=max(1, sources), description=CompressedNote.model_fields["source"].description)),
    )
    return create_model(
        "CompressedNotes",
        notes=at_most(note, max_notes, min_items=1, description="The findings, each tied to the source it comes from."),
    )


async def compress_findings(
    gateway: Gateway,
    topic: str,
    sources: Sequence[tuple[str, Sequence[str]]],
    max_notes: int,
    role: str = "researcher",
) -> list[tuple[int, str]]:
    """The notes taken from `sources` (title, notes) compressed into at most `max_notes`, each as
    (source number 1..N, text); the caller keeps only numbers that name a source."""
    body = "\n\n".join(
        f"[{number}] {title}\n" + "\n".join(f"- {note}" for note in notes)
        for number, (title, notes) in enumerate(sources, start=1)
    )
    task = (
        f"Compress these notes into at most {max_notes} notes that answer the sub-topic for this user: merge "
        "repeats, keep numbers, prices, dates and conditions exactly, drop what does not help. Give each note the "
        "number of the source it comes from; never merge facts of different sources into one note."
    )
    answer = await gateway.structured(
        role,
        build_messages(RESEARCHER_ROLE, [Section("Sub-topic", topic), Section("Notes", body, untrusted=True)], task),
        _compressed_model(max_notes, len(sources)),
    )
    return [(note.source, note.text.strip()) for note in answer.notes if note.text.strip()]  # type: ignore[attr-defined]
