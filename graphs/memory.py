"""The memory subgraph: ingest the user's history, then recall the context for the query.

Both steps are nodes so Studio shows extraction and retrieval separately; the backend doing the
work comes from the runtime context (`system.memory`). With `memory_view` set (a system's
`random_profile` option), the memory reads that view's history — another user's — for the
asker's query. Alone (e.g. in Studio) it takes `{"benchmark", "case_id"}` too.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from benchmarks.case import CaseView
from graphs.context import EpisodeContext
from graphs.inputs import CaseReference, case_from_input
from graphs.resources import Resources, resources_for
from memory.base import UserContext, memory_query


class MemoryInput(CaseReference, total=False):
    view: CaseView
    memory_view: CaseView


class MemoryOutput(TypedDict):
    user_context: UserContext


class MemoryState(MemoryInput, MemoryOutput, total=False):
    pass


async def ingest_history(resources: Resources, view: CaseView) -> None:
    await resources.memory.ingest(view.user_id, view.history)


async def recall_context(resources: Resources, view: CaseView, memory_view: CaseView | None = None) -> UserContext:
    """What the memory holds about `memory_view`'s user (default: the asker) for the asker's query."""
    return await resources.memory.context((memory_view or view).user_id, memory_query(view))


async def ingest(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["recall"]]:
    update = {}
    if state.get("view") is None:  # run alone: the case by reference
        context = runtime.context or EpisodeContext()
        update["view"] = case_from_input(state, context).view(context.system.setting)
    await ingest_history(resources_for(runtime.context), state.get("memory_view") or update.get("view") or state["view"])
    return Command(goto="recall", update=update)


async def recall(state: MemoryState, runtime: Runtime[EpisodeContext]) -> MemoryOutput:
    context = await recall_context(resources_for(runtime.context), state["view"], state.get("memory_view"))
    return {"user_context": context}


def build_memory_graph():
    graph = StateGraph(MemoryState, context_schema=EpisodeContext, input_schema=MemoryInput, output_schema=MemoryOutput)
    graph.add_node("ingest", ingest)
    graph.add_node("recall", recall)
    graph.add_edge(START, "ingest")
    return graph.compile(name="memory")
