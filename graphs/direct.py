"""`direct`: answer from the user's context alone, no search (LaMP-QA's non-RAG baselines:
no personalization with memory `none`, RAG-Personalization with a retrieving backend, and its
random-profile control with `random_profile = true`)."""

from __future__ import annotations

from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.answerer import answer
from graphs.context import EpisodeContext
from graphs.inputs import PipelineInput, PipelineOutput, input_meta
from graphs.pipelines import PipelineOptions, PipelineSpec, register_pipeline
from graphs.start import pipeline_resources, start_inputs

PIPELINE = "direct"


class DirectState(PipelineInput, PipelineOutput, total=False):
    pass


async def start(state: DirectState, runtime: Runtime[EpisodeContext]) -> Command[Literal["answer"]]:
    return Command(goto="answer", update=await start_inputs(state, runtime, PIPELINE))


async def write_answer(state: DirectState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    response = await answer(gateway, state["view"], state["user_context"].text)
    response.meta.update(input_meta(state) | {"critical_path_calls": 1})
    return {"response": response}


def build_direct_graph():
    graph = StateGraph(DirectState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput)
    graph.add_node("start", start)
    graph.add_node("answer", write_answer)
    graph.add_edge(START, "start")
    return graph.compile(name=PIPELINE)


register_pipeline(PipelineSpec(PIPELINE, "answer from the user's context, no search", build_direct_graph, PipelineOptions))
