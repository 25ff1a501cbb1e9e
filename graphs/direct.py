"""`direct`: answer from the user's context alone, no search (LaMP-QA's non-RAG baselines)."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from agents.answerer import answer
from agents.response import SystemResponse
from benchmarks.case import CaseView
from graphs.context import EpisodeContext
from graphs.resources import resources_for
from memory.base import UserContext


class PipelineInput(TypedDict):
    """What every pipeline receives: the case as the system may see it, and the memory's context."""

    view: CaseView
    user_context: UserContext


class PipelineOutput(TypedDict):
    response: SystemResponse


class DirectState(PipelineInput, PipelineOutput, total=False):
    pass


async def write_answer(state: DirectState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    gateway = resources_for(runtime.context).gateway
    return {"response": await answer(gateway, state["view"], state["user_context"].text)}


def build_direct_graph():
    graph = StateGraph(DirectState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput)
    graph.add_node("answer", write_answer)
    graph.add_edge(START, "answer")
    return graph.compile(name="direct")
