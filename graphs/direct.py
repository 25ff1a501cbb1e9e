"""`direct`: answer from the user's context alone, no search (LaMP-QA's non-RAG baselines:
no personalization with memory `none`, RAG-Personalization with a retrieving backend, and its
random-profile control with `random_profile = true`)."""

from __future__ import annotations

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from atelier.agents.answerer import answer
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.pipelines import PipelineOptions, PipelineSpec, register_pipeline
from atelier.graphs.start import meta_of, pipeline_resources, start_inputs, view_of

PIPELINE = "direct"


class DirectState(PipelineInput, PipelineOutput, total=False):
    pass


async def write_answer(state: DirectState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    state, update = await start_inputs(state, runtime, PIPELINE)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    response = await answer(gateway, view_of(state, runtime, PIPELINE), state["user_context"].text)
    response.meta.update(meta_of(state, runtime, PIPELINE) | {"critical_path_calls": 1})
    return {**update, "response": response}  # type: ignore[typeddict-item]


def build_direct_graph():
    graph = StateGraph(
        DirectState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("answer", write_answer)
    graph.add_edge(START, "answer")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(
        PIPELINE,
        "answer from the user's context, no search",
        build_direct_graph,
        PipelineOptions,
        uses_web=False,
        step=write_answer,
    )
)
