"""`planpers` (LaMP-QA §4, Plan-RAG Personalization): the user's profile items retrieved through
the configured memory backend (k items: the backend's own setting, e.g. `retrieval`'s `k`), a
plan of the aspects this user expects, then an answer that follows the plan.

    plan -> answer

`random_profile = true` gives it another user's context (seeded): the paper's control.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import Field

from atelier.agents.answerer import answer
from atelier.agents.models.gateway import ModelCallError
from atelier.agents.planner import plan_aspects
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.pipelines import AnswerBudgetOptions, PipelineSpec, register_pipeline
from atelier.graphs.start import meta_of, pipeline_options_of, pipeline_resources, start_inputs, view_of

PIPELINE = "planpers"


class PlanPersOptions(AnswerBudgetOptions):
    max_aspects: int = Field(default=5, ge=1, le=20, description="Aspects the plan may hold.")


class PlanPersState(PipelineInput, PipelineOutput, total=False):
    plan: list[str]
    degraded: list[Degradation]


async def plan(state: PlanPersState, runtime: Runtime[EpisodeContext]) -> Command[Literal["answer"]]:
    state, update = await start_inputs(state, runtime, PIPELINE)
    options = pipeline_options_of(runtime, PIPELINE, PlanPersOptions)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    query = view_of(state, runtime, PIPELINE).query
    try:
        aspects = await plan_aspects(gateway, query, state["user_context"].text, options.max_aspects)
    except ModelCallError as exc:  # answer without a plan, and say so
        aspects, update = (
            [],
            {**update, "degraded": [degradation("step_fallback", "plan", f"answered without a plan: {exc}")]},
        )
    else:
        if not aspects:
            update = {
                **update,
                "degraded": [degradation("empty_answer", "plan", "no aspects; answered without a plan")],
            }
    return Command(goto="answer", update={**update, "plan": aspects})


async def write_answer(state: PlanPersState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    view = view_of(state, runtime, PIPELINE)
    response = await answer(gateway, view, state["user_context"].text, role="writer", plan=state["plan"])
    response.meta.update(meta_of(state, runtime, PIPELINE) | {"plan": state["plan"], "critical_path_calls": 2})
    response.degraded = [*state.get("degraded", []), *response.degraded]
    return {"response": response}


def build_planpers_graph():
    graph = StateGraph(
        PlanPersState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("plan", plan)
    graph.add_node("answer", write_answer)
    graph.add_edge(START, "plan")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(
        PIPELINE,
        "LaMP-QA PlanPers: plan the aspects this user expects, then answer",
        build_planpers_graph,
        PlanPersOptions,
        uses_web=False,
    )
)
