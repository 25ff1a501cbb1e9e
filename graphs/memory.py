"""The memory subgraph: ingest the user's history, then recall the context for the query.

Both steps are nodes so Studio shows extraction and retrieval separately; the backend doing the
work comes from the runtime context (`system.memory`).
"""

from __future__ import annotations

from typing import Literal, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from benchmarks.case import CaseView
from graphs.context import EpisodeContext
from graphs.resources import resources_for
from memory.base import UserContext, memory_query


class MemoryInput(TypedDict):
    view: CaseView


class MemoryOutput(TypedDict):
    user_context: UserContext


class MemoryState(MemoryInput, MemoryOutput, total=False):
    pass


async def ingest(state: MemoryState, runtime: Runtime[EpisodeContext]) -> Command[Literal["recall"]]:
    view = state["view"]
    await resources_for(runtime.context).memory.ingest(view.user_id, view.history)
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
