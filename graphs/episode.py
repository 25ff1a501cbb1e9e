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
from collections.abc import Sequence
from typing import Annotated, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from atelier.agents.judges.base import JudgeResult
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.graphs.context import EpisodeContext
from atelier.graphs.contract import (
    PipelineOutputError,
    checked_citations,
    checked_response,
    output_problem,
    returning_only_its_response,
    sending_only_its_response,
)
from atelier.graphs.inputs import (
    CaseReference,
    GoldContext,
    GraphInputError,
    case_from_input,
    remember_cases,
    system_inputs,
)
from atelier.graphs.judge import build_judge_graph
from atelier.graphs.memory import ingest, recall
from atelier.graphs.pipelines import PIPELINES, node_name
from atelier.graphs.resources import resources_for
from atelier.graphs.simulate import build_conversation_graph, conversation_branch
from atelier.memory.base import UserContext


class EpisodeInput(CaseReference, total=False):
    case: Case  # or {"benchmark", "case_id"}: the case by reference (handy in Studio)


class EpisodeOutput(TypedDict, total=False):
    user_context: UserContext
    response: SystemResponse
    judgments: Annotated[list[JudgeResult], operator.add]
    ingest_s: float  # the seconds the memory's ingest step took (graphs/memory.py)


class EpisodeState(EpisodeInput, EpisodeOutput, total=False):
    profile_case_id: str
    gold_context: GoldContext


def prepare(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["ingest"]]:
    context = runtime.context or EpisodeContext()
    case = case_from_input(state, context)
    remember_cases(context.run_id, [case])  # the judges look it up by reference
    inputs = system_inputs(case, context, context.system.pipeline, resources_for(context).sources)
    return Command(goto="ingest", update=inputs)


def judged(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> str:
    """As the pipeline ends: its response held to the pipeline contract (graphs/contract.py; none, or
    not a SystemResponse, fails the episode naming the pipeline); then to the judges, unless the run
    has none that judge one response (a run of systems only, or of LaMP-QA's pairwise judge, which
    the runner runs once both responses exist)."""
    pipeline = (runtime.context or EpisodeContext()).system.pipeline
    response = checked_response(state, pipeline, step=node_name(pipeline))
    resources = resources_for(runtime.context)
    web = resources.opened_web()
    checked_citations(
        response,
        pipeline,
        node_name(pipeline),
        resources.sources.has,
        web.saw if web is not None else lambda url: False,
    )
    judges = resources.judges
    return "judge" if any(not judge.comparative for judge in judges) else END


def _episode_step(pipeline_graph, pipeline: str):
    """A pipeline's compiled graph as an episode's step: refused (PipelineOutputError naming it and the keys)
    when it would return more than its response (graphs/contract.py `output_problem`); run, it may send
    the episode nothing but its response through Command.PARENT either (`sending_only_its_response`)."""
    problem = output_problem(pipeline_graph, pipeline, EpisodeState.__annotations__)
    if problem is not None:
        raise PipelineOutputError(problem)
    return sending_only_its_response(pipeline_graph, pipeline, node_name(pipeline))


def build_episode_graph(
    pipelines: str | Sequence[str] | None = None, checkpointer=None, conversations: Sequence[str] = ()
):
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
            return node_name(spec.pipeline)
        kind = "conversation branch" if spec.conversation is not None else "pipeline"
        raise GraphInputError(
            f"this episode graph has no {kind} for pipeline {spec.pipeline!r}; it has: "
            f"{', '.join([*names, *map(conversation_branch, talks)])}"
        )

    graph = StateGraph(
        EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput
    )
    graph.add_node("prepare", prepare)
    # the memory graph's two nodes, in place rather than as a subgraph: a nested graph costs each
    # episode its own loop and checkpoints (~3 ms of CPU) and adds nothing here
    graph.add_node("ingest", ingest)
    graph.add_node("recall", recall)
    for name in names:
        spec = PIPELINES.get(name)
        step = returning_only_its_response(spec.step, name, node_name(name)) if spec.step else None
        graph.add_node(node_name(name), step or _episode_step(spec.build(), name))
        graph.add_conditional_edges(node_name(name), judged, ["judge", END])
    for name in talks:
        graph.add_node(conversation_branch(name), build_conversation_graph(name))
        graph.add_conditional_edges(conversation_branch(name), judged, ["judge", END])
    graph.add_node("judge", build_judge_graph())
    graph.add_edge(START, "prepare")
    graph.add_conditional_edges("recall", system, [*map(node_name, names), *map(conversation_branch, talks)])
    return graph.compile(checkpointer=checkpointer, name="episode")


def episode_graph_for(systems: Sequence, checkpointer=None):
    """The episode graph a run of these systems needs: a plain branch for each pipeline some system
    runs as is, a conversation branch for each one some system runs in conversation."""
    return build_episode_graph(
        sorted({s.pipeline for s in systems if s.conversation is None}),
        checkpointer=checkpointer,
        conversations=sorted({s.pipeline for s in systems if s.conversation}),
    )
