"""The memory subgraph: ingest the user's history, then recall the context for the query.

Both steps are nodes so Studio shows extraction and retrieval separately; the backend doing the
work comes from the runtime context (`system.memory`). It takes the case by reference
(`{"benchmark", "case_id"}`); with `profile_case_id` set (a system's `random_profile` option) the
memory reads that case's user history — another user's — for the asker's query.

Every recall first makes sure the user's history is ingested (ingest skips the events it has): an
episode resumed past `ingest` in a new process, whose backend has not seen the user yet, gets the
memory back before it recalls — rebuilt from the run's memory journal (memory/journal.py), then
topped up from the history.

A system that reads its memory only through the `recall_memory` tool (`memory_access = "tool"`,
graphs/memory_tool.py) gets no upfront recall: `recall` gives it an empty context.
"""

from __future__ import annotations

import time
from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from atelier.benchmarks.case import CaseView
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import CaseReference, case_view, memory_view
from atelier.graphs.memory_tool import reads_memory_upfront
from atelier.graphs.resources import Resources, resources_for
from atelier.memory.base import UserContext, memory_query


class MemoryInput(CaseReference, total=False):
    view: CaseView
    profile_case_id: str


class MemoryOutput(TypedDict):
    user_context: UserContext


class MemoryState(MemoryInput, MemoryOutput, total=False):
    ingest_s: float  # the seconds the ingest step took (memory cost: runs/reading/usage.py)


async def ingest_history(resources: Resources, view: CaseView) -> None:
    await (await resources.open_memory()).ingest(view.user_id, view.history)


async def recall_context(resources: Resources, view: CaseView, owner: CaseView | None = None) -> UserContext:
    """What the memory holds about `owner`'s user (default: the asker) for the asker's query, once
    `owner`'s history is in it (a no-op when the `ingest` step ran in this process), held to the
    memory contract (`Resources.recall`)."""
    return await resources.recall(owner or view, memory_query(view))


async def ingest(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["recall"]]:
    """Ingest the user's history; how long it took (the ingest, or the wait for another episode's
    ingest of the same user) goes into the state as `ingest_s`: the memory's cost, not the episode's."""
    context = runtime.context or EpisodeContext()
    started = time.perf_counter()
    await ingest_history(resources_for(context), memory_view(state, context))
    return Command(goto="recall", update={"ingest_s": round(time.perf_counter() - started, 4)})


def no_upfront_context(context: EpisodeContext) -> UserContext:
    """The upfront context of a system that reads its memory only through the tool: nothing."""
    return UserContext(backend=str(context.system.memory.get("backend", "none")), form="none")


async def recall(state: MemoryState, runtime: Runtime[EpisodeContext]) -> MemoryOutput:
    context = runtime.context or EpisodeContext()
    if not reads_memory_upfront(context):
        return {"user_context": no_upfront_context(context)}
    user_context = await recall_context(resources_for(context), case_view(state, context), memory_view(state, context))
    return {"user_context": user_context}


def build_memory_graph():
    graph = StateGraph(MemoryState, context_schema=EpisodeContext, input_schema=MemoryInput, output_schema=MemoryOutput)
    graph.add_node("ingest", ingest)
    graph.add_node("recall", recall)
    graph.add_edge(START, "ingest")
    return graph.compile(name="memory")
