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


def _memory_view(state: MemoryState) -> CaseView:
    return state.get("memory_view") or state["view"]


async def ingest_history(resources: Resources, view: CaseView) -> None:
    await resources.memory.ingest(view.user_id, view.history)


async def recall_context(resources: Resources, view: CaseView, memory_view: CaseView | None = None) -> UserContext:
    """What the memory holds about `memory_view`'s user (default: the asker) for the asker's query."""
    return await resources.memory.context((memory_view or view).user_id, memory_query(view))


def prepare(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["ingest"]]:
    if state.get("view") is not None:
        return Command(goto="ingest")
    context = runtime.context or EpisodeContext()
    case = case_from_input(state, context)
    return Command(goto="ingest", update={"view": case.view(context.system.setting)})


async def ingest(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["recall"]]:
    await ingest_history(resources_for(runtime.context), _memory_view(state))
    return Command(goto="recall")


async def recall(state: MemoryState, runtime: Runtime[EpisodeContext]) -> MemoryOutput:
    context = await recall_context(resources_for(runtime.context), state["view"], state.get("memory_view"))
    return {"user_context": context}


def build_memory_graph():
    graph = StateGraph(MemoryState, context_schema=EpisodeContext, input_schema=MemoryInput, output_schema=MemoryOutput)
    graph.add_node("prepare", prepare)
    graph.add_node("ingest", ingest)
    graph.add_node("recall", recall)
    graph.add_edge(START, "prepare")
    return graph.compile(name="memory")
