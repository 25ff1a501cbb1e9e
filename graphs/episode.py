"""`episode`: the unit a run executes per case and system —
prepare the system's inputs -> memory (ingest, recall) -> the system's pipeline -> judges.

The system's subgraphs only ever receive the `CaseView` (no gold fields exist on it) and what
their options explicitly add (`graphs.inputs`); the judge subgraph looks the full `Case` up by its
reference (`benchmark`, `case_id`), which is all the state keeps of it. The graph holds one branch
per pipeline and takes the one the runtime context's system names, so Studio can run an episode
with any pipeline.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, Sequence

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from benchmarks.case import Case
from graphs.context import EpisodeContext
from graphs.inputs import CaseReference, GoldContext, GraphInputError, case_from_input, remember_cases, system_inputs
from graphs.judge import build_judge_graph
from graphs.memory import build_memory_graph
from graphs.pipelines import PIPELINES
from graphs.resources import resources_for
from memory.base import UserContext


class EpisodeInput(CaseReference, total=False):
    case: Case  # or {"benchmark", "case_id"}: the case by reference (handy in Studio)


class EpisodeOutput(TypedDict, total=False):
    user_context: UserContext
    response: SystemResponse
    judgments: Annotated[list[JudgeResult], operator.add]


class EpisodeState(EpisodeInput, EpisodeOutput, total=False):
    profile_case_id: str
    gold_context: GoldContext


def prepare(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["memory"]]:
    context = runtime.context or EpisodeContext()
    case = case_from_input(state, context)
    remember_cases(context.run_id, [case])  # the judges look it up by reference
    inputs = system_inputs(case, context, context.system.pipeline, resources_for(context).sources)
    return Command(goto="memory", update=inputs)


def build_episode_graph(pipelines: str | Sequence[str] | None = None, checkpointer=None):
    """An episode graph with a branch for each of `pipelines` (default: every registered one)."""
    names = [pipelines] if isinstance(pipelines, str) else list(pipelines or PIPELINES.names())

    def system(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> str:
        """The branch of the system's pipeline."""
        pipeline = (runtime.context or EpisodeContext()).system.pipeline
        if pipeline not in names:
            raise GraphInputError(f"this episode graph has no pipeline {pipeline!r}; it has: {', '.join(names)}")
        return pipeline

    graph = StateGraph(EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput)
    graph.add_node("prepare", prepare)
    graph.add_node("memory", build_memory_graph())
    for name in names:
        graph.add_node(name, PIPELINES.get(name).build())
        graph.add_edge(name, "judge")
    graph.add_node("judge", build_judge_graph())
    graph.add_edge(START, "prepare")
    graph.add_conditional_edges("memory", system, names)
    return graph.compile(checkpointer=checkpointer, name="episode")
