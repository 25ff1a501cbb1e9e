"""The memory subgraph: ingest the user's history, then recall the context for the query.

Both steps are nodes so Studio shows extraction and retrieval separately; the backend doing the
work comes from the runtime context (`system.memory`). In an episode the view carries no history
events: they are read, under the view's setting, from the case in the graph's store (`case_key`);
given a view alone (Studio), its own history is ingested.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from benchmarks.case import CaseView, HistoryEvent
from graphs.case_store import get_case, store_of
from graphs.context import EpisodeContext
from graphs.resources import resources_for
from memory.base import UserContext, memory_query


class MemoryInput(TypedDict):
    view: CaseView
    case_key: NotRequired[str]


class MemoryOutput(TypedDict):
    user_context: UserContext


class MemoryState(MemoryInput, MemoryOutput, total=False):
    pass


async def _history(state: MemoryState, runtime: Runtime[EpisodeContext]) -> list[HistoryEvent]:
    view = state["view"]
    if state.get("case_key"):
        case = await get_case(store_of(runtime), state["case_key"])
        return case.view(view.setting).history
    return view.history


async def ingest(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["recall"]]:
    await resources_for(runtime.context).memory.ingest(state["view"].user_id, await _history(state, runtime))
    return Command(goto="recall")


async def recall(state: MemoryState, runtime: Runtime[EpisodeContext]) -> MemoryOutput:
    view = state["view"]
    context = await resources_for(runtime.context).memory.context(view.user_id, memory_query(view))
    return {"user_context": context}


def build_memory_graph():
    graph = StateGraph(MemoryState, context_schema=EpisodeContext, input_schema=MemoryInput, output_schema=MemoryOutput)
    graph.add_node("ingest", ingest)
    graph.add_node("recall", recall)
    graph.add_edge(START, "ingest")
    return graph.compile(name="memory")
