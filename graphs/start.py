"""What the first node of every pipeline graph does before its own work.

Inside an episode the system's inputs are ready (the episode prepared them and ran the memory
subgraph). Run alone — in Studio, or from a test — a pipeline is given `{"benchmark", "case_id"}`
and its first node prepares the same inputs itself (`start_inputs`): the view, what the system's
options add, and the user's context from the configured memory backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from langgraph.runtime import Runtime

from atelier.benchmarks.case import CaseView
from atelier.graphs.context import EpisodeContext
from atelier.graphs.heavy_imports import ready_for_server
from atelier.graphs.inputs import case_from_input, case_view, input_meta, memory_view, options_for, system_inputs
from atelier.graphs.memory import no_upfront_context, recall_context
from atelier.graphs.memory_tool import reads_memory_upfront
from atelier.graphs.pipelines import PipelineOptions
from atelier.graphs.resources import Resources, resources_for

OptionsT = TypeVar("OptionsT", bound=PipelineOptions)
StateT = TypeVar("StateT", bound=Mapping[str, Any])  # a pipeline's state (a TypedDict)


_as_pipeline: dict[tuple[int, str], tuple[EpisodeContext, EpisodeContext]] = {}


def pipeline_context(runtime: Runtime[EpisodeContext], pipeline: str | None = None) -> EpisodeContext:
    """The runtime context with `pipeline` as its system's pipeline: a pipeline graph run alone (in
    Studio) under a context written for another pipeline runs as this one, with the same options.
    None: the context's own pipeline (a plugin's graph, which does not know the name a recipe gives it)."""
    context = runtime.context or EpisodeContext()
    if pipeline is None or context.system.pipeline == pipeline:
        return context
    known = _as_pipeline.get((id(context), pipeline))
    if known is None or known[0] is not context:
        system = context.system.model_copy(update={"pipeline": pipeline})
        known = (context, context.model_copy(update={"system": system}))
        _as_pipeline[(id(context), pipeline)] = known
    return known[1]


def pipeline_options_of(runtime: Runtime[EpisodeContext], pipeline: str, model: type[OptionsT]) -> OptionsT:
    options = options_for(pipeline_context(runtime, pipeline), pipeline)
    assert isinstance(options, model), f"{pipeline} options are {type(options).__name__}, not {model.__name__}"
    return options


def pipeline_resources(runtime: Runtime[EpisodeContext], pipeline: str | None = None) -> Resources:
    return resources_for(pipeline_context(runtime, pipeline))


async def start_inputs(
    state: StateT, runtime: Runtime[EpisodeContext], pipeline: str | None = None
) -> tuple[StateT, dict[str, Any]]:
    """The pipeline's complete inputs, and the state update that completes them (empty inside an episode).
    The inputs are a dict of the state's keys and the inputs' (a state of the same TypedDict)."""
    if state.get("user_context") is not None:
        return cast(StateT, dict(state)), {}
    await ready_for_server()  # run alone, perhaps on a server's event loop: nothing below may import there
    context = pipeline_context(runtime, pipeline)
    pipeline = context.system.pipeline
    resources = resources_for(context)
    update: dict[str, Any] = {}
    if state.get("view") is None:
        update = system_inputs(case_from_input(state, context), context, pipeline, resources.sources)
    merged = {**state, **update}
    update["user_context"] = (
        await recall_context(resources, case_view(merged, context), memory_view(merged, context))
        if reads_memory_upfront(context, pipeline)
        else no_upfront_context(context)  # memory_access = "tool": the system recalls through its tool
    )
    return cast(StateT, {**merged, "user_context": update["user_context"]}), update


def view_of(state: Mapping[str, Any], runtime: Runtime[EpisodeContext], pipeline: str | None = None) -> CaseView:
    return case_view(state, pipeline_context(runtime, pipeline))


def meta_of(state: Mapping[str, Any], runtime: Runtime[EpisodeContext], pipeline: str | None = None) -> dict[str, Any]:
    return input_meta(state, pipeline_context(runtime, pipeline))
