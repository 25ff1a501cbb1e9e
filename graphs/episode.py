"""`episode`: the unit a run executes per case and system —
prepare the system's inputs -> memory (ingest, recall) -> the system's pipeline -> judges.

The system's subgraphs only ever receive the `CaseView` (no gold fields exist on it) and what
their options explicitly add (`graphs.inputs`); the judge subgraph looks the full `Case` up by its
reference (`benchmark`, `case_id`), which is all the state keeps of it. The graph holds one branch
per pipeline and takes the one the runtime context's system names, so Studio can run an episode
with any pipeline; a system with `conversation` options takes its pipeline's conversation branch,
where it talks with the simulated user for several turns (graphs/simulate.py).
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
from graphs.simulate import build_conversation_graph, conversation_branch
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


def build_episode_graph(pipelines: str | Sequence[str] | None = None, checkpointer=None,
                        conversations: Sequence[str] = ()):
    """An episode graph with a branch for each of `pipelines` (default: every registered one), and
    for each of `conversations` a branch where that pipeline talks with the simulated user for
    several turns (`<pipeline>_conversation`, graphs/simulate.py), taken by systems with
    `conversation` options (and by every system when the graph has no plain branch for it)."""
    names = [pipelines] if isinstance(pipelines, str) else list(PIPELINES.names() if pipelines is None else pipelines)
    talks = list(conversations)

    def system(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> str:
        """The branch of the system's pipeline (plain, or in conversation with the simulated user)."""
        spec = (runtime.context or EpisodeContext()).system
        if spec.pipeline in talks and (spec.conversation is not None or spec.pipeline not in names):
            return conversation_branch(spec.pipeline)
        if spec.pipeline in names and spec.conversation is None:
            return spec.pipeline
        kind = "conversation branch" if spec.conversation is not None else "pipeline"
        raise GraphInputError(f"this episode graph has no {kind} for pipeline {spec.pipeline!r}; it has: "
                              f"{', '.join([*names, *map(conversation_branch, talks)])}")

    graph = StateGraph(EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput)
    graph.add_node("prepare", prepare)
    graph.add_node("memory", build_memory_graph())
    for name in names:
        graph.add_node(name, PIPELINES.get(name).build())
        graph.add_edge(name, "judge")
    for name in talks:
        graph.add_node(conversation_branch(name), build_conversation_graph(name))
        graph.add_edge(conversation_branch(name), "judge")
    graph.add_node("judge", build_judge_graph())
    graph.add_edge(START, "prepare")
    graph.add_conditional_edges("memory", system, [*names, *map(conversation_branch, talks)])
    return graph.compile(checkpointer=checkpointer, name="episode")
