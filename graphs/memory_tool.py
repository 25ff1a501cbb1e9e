"""Memory as a tool: `recall_memory(query)`, served by the system's memory backend.

Every pipeline that reads memory reads it once, up front (graphs/memory.py). Agents built on mem0
or Letta query memory while they work; `pipeline_options.memory_access` lets a system do either
or both:

- `upfront`: the memory's context for the question, recalled before the system starts (as ever);
- `tool`: no upfront recall; the system is offered `recall_memory(query)` and asks what it wants;
- `both`: the upfront context and the tool.

A recall asks the backend (its `context`) for the user's context for the tool's query, and is one
ledger line under node `recall_memory` (`Ledger.record_tool`: not a model call, no tokens) holding
the query and the event ids it returned — what history-retrieval scoring and the report's
recalled-memory view read for tool recalls. A response's meta counts the recalls
(`memory_recalls`) and lists them (`recalled_memory`: each query, the event ids, the text), so a
result line holds them for scoring (`history.*` ranks the upfront context's events, then each
recall's, in the order the system received them) and for the report.

With `tool` the episode's upfront recall is skipped (`reads_memory_upfront`): its `user_context`
is empty, and the system's memory is exactly what it recalled.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atelier.benchmarks.case import CaseView
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import options_for
from atelier.graphs.resources import Resources
from atelier.memory.base import MemoryQuery

MemoryAccess = Literal["upfront", "tool", "both"]

RECALL_MEMORY = "recall_memory"  # the tool's name, and its ledger node
DEFAULT_MAX_RECALLS = 3


class MemoryAccessOptions(BaseModel):
    """A mixin for a pipeline's options: how the system reads its memory."""

    memory_access: MemoryAccess = Field(
        default="upfront",
        description="How the system reads its memory: 'upfront' (the context for the question, recalled "
        "before it starts), 'tool' (no upfront recall; it may call recall_memory(query) while it works), "
        "'both' (the upfront context and the tool).",
    )

    max_recalls: int = Field(
        default=DEFAULT_MAX_RECALLS,
        ge=1,
        le=20,
        description="With 'tool' or 'both': the most recall_memory calls the system may make in one episode, "
        "every step counted (rag: its answer step; deep_research: the brief's author, then its researchers, who "
        "share what the brief left).",
    )

    @model_validator(mode="after")
    def _recalls_need_the_tool(self) -> MemoryAccessOptions:
        # not `model_fields_set`: a recipe's options are validated again from their dump, defaults included
        if self.max_recalls != DEFAULT_MAX_RECALLS and not self.recall_tool:
            raise ValueError("max_recalls only applies with memory_access = 'tool' or 'both'")
        return self

    @property
    def recalls_upfront(self) -> bool:
        return self.memory_access in ("upfront", "both")

    @property
    def recall_tool(self) -> bool:
        return self.memory_access in ("tool", "both")


RECALL_MEMORY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RECALL_MEMORY,
        "description": "Search what the memory holds about the user (their past conversations, preferences, "
        "background) for what you need to know about them to answer well. Returns the relevant parts of "
        "their history.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 300,
                    "description": "What to look up about the user, in a few words.",
                }
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


class Recall(BaseModel):
    """What one `recall_memory` call gave: the context text and the history events it drew on."""

    model_config = ConfigDict(extra="forbid")

    query: str
    text: str = ""
    event_ids: list[str] = Field(default_factory=list, description="History events returned, most relevant first.")
    degraded: list[Degradation] = Field(default_factory=list, description="What the memory could not give.")


async def recall_memory(resources: Resources, view: CaseView, query: str, owner: CaseView | None = None) -> Recall:
    """The memory's context about `owner`'s user (default: the asker, `view`) for `query`, once their
    history is in it; one ledger line under node `recall_memory` with the query and the event ids."""
    owner = owner or view
    started = time.perf_counter()
    context = await resources.recall(owner, MemoryQuery(text=query))  # ingests first: a no-op once it is in
    recall = Recall(query=query, text=context.text, event_ids=context.event_ids, degraded=context.degraded)
    resources.gateway.ledger.record_tool(
        RECALL_MEMORY,
        call_id=_recall_id(resources, query),
        tool_input={"query": query},
        tool_output={"event_ids": recall.event_ids, "backend": context.backend, "tokens": context.tokens},
        latency_ms=(time.perf_counter() - started) * 1000,
    )
    return recall


def _recall_id(resources: Resources, query: str) -> str:
    """The recall's ledger call id: the same when a resumed episode runs the step that made it again
    (a graph task's id is the same when it runs again from the same checkpoint), so the ledger's
    recalls are counted once (`agents.models.ledger.tool_calls` keeps the first line of each id).
    The n-th recall of the same query in one execution of the step gets its own. Outside a graph: a
    random id."""
    try:
        from langgraph.config import get_config

        config = get_config()
    except RuntimeError:  # not inside a graph run
        return uuid.uuid4().hex[:12]
    where = "|".join(
        str(part)
        for part in (
            config.get("configurable", {}).get("thread_id", ""),
            config.get("metadata", {}).get("langgraph_checkpoint_ns", ""),
            config.get("configurable", {}).get("checkpoint_ns", ""),
            query,
        )
    )
    task = asyncio.current_task()  # a step run again (a resumed episode) counts from 0 again
    counts = resources.recall_counts.setdefault(task, {}) if task is not None else {}
    nth = counts.get(where, 0)
    counts[where] = nth + 1
    return hashlib.sha256(f"{where}|{nth}".encode()).hexdigest()[:16]


def reads_memory_upfront(context: EpisodeContext, pipeline: str | None = None) -> bool:
    """Whether the system (its pipeline's options) is given the memory's context up front: every
    system but one with `memory_access = "tool"`."""
    options = options_for(context, pipeline or context.system.pipeline)
    return not isinstance(options, MemoryAccessOptions) or options.recalls_upfront


def recalled_context(upfront: str, recalls: list[Recall]) -> str:
    """What the system knows about the user: the upfront context, then each recall's text (a text
    an earlier recall already gave is not repeated)."""
    parts = [upfront] if upfront else []
    for recall in recalls:
        if recall.text and recall.text not in parts:
            parts.append(recall.text)
    return "\n\n".join(parts)


def recalls_meta(options: MemoryAccessOptions, recalls: list[Recall]) -> dict[str, Any]:
    """What a response's meta records about memory access: the mode, the recall count, each recall."""
    meta: dict[str, Any] = {"memory_access": options.memory_access}
    if options.recall_tool:
        meta["memory_recalls"] = len(recalls)
        meta["recalled_memory"] = [r.model_dump(include={"query", "event_ids", "text"}) for r in recalls]
    return meta


def recall_degradations(options: MemoryAccessOptions, recalls: list[Recall], step: str) -> list[Degradation]:
    """What the recalls could not give (each recall's own, under `recall_memory`), and, when the
    system reads memory only through the tool and never called it, that its answer rests on no memory."""
    degraded = [d.model_copy(update={"step": RECALL_MEMORY}) for r in recalls for d in r.degraded]
    if not options.recalls_upfront and not recalls:
        degraded.append(
            degradation(
                "step_fallback",
                step,
                "memory_access = tool: the model made no recall_memory call; the answer rests on no memory",
            )
        )
    return degraded
