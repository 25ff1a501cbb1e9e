"""`episode`: the unit a run executes per case and system —
prepare the system's view -> memory (ingest, recall) -> system pipeline -> judges.

The system's subgraphs only ever receive the `CaseView` (no gold fields exist on it); the judge
subgraph receives the full `Case`.
"""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Annotated, Literal, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from benchmarks.case import Case, CaseView
from benchmarks.errors import ConfigError
from benchmarks.registry import load_cases
from graphs.context import EpisodeContext
from graphs.judge import build_judge_graph
from graphs.memory import build_memory_graph
from graphs.pipelines import PIPELINES
from graphs.simulate import build_conversation_graph
from memory.base import UserContext


class EpisodeInput(TypedDict, total=False):
    case: Case
    benchmark: str  # with case_id: load the case by reference (handy in Studio)
    case_id: str


class EpisodeOutput(TypedDict, total=False):
    case: Case
    view: CaseView
    user_context: UserContext
    response: SystemResponse
    judgments: Annotated[list[JudgeResult], operator.add]


class EpisodeState(EpisodeInput, EpisodeOutput, total=False):
    pass


@lru_cache(maxsize=64)
def _benchmark_cases(name: str) -> dict[str, Case]:
    return {c.id: c for c in load_cases(name)}


def prepare(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["memory"]]:
    case = state.get("case")
    if case is None:
        benchmark, case_id = state.get("benchmark", "sample"), state.get("case_id")
        cases = _benchmark_cases(benchmark)
        if case_id not in cases:
            raise ConfigError(f"no case {case_id!r} in benchmark {benchmark!r} (it has {len(cases)} cases)")
        case = cases[case_id]
    system = (runtime.context or EpisodeContext()).system
    return Command(goto="memory", update={"case": case, "view": case.view(system.setting, hide=system.hide)})


def build_episode_graph(pipeline: str = "direct", checkpointer=None, conversation: bool = False):
    """`conversation`: the system talks with the simulated user for several turns (graphs/simulate.py)
    and the judges see the transcript."""
    graph = StateGraph(EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput)
    graph.add_node("prepare", prepare)
    graph.add_node("memory", build_memory_graph())
    graph.add_node("system", build_conversation_graph(pipeline) if conversation else PIPELINES.get(pipeline).build())
    graph.add_node("judge", build_judge_graph())
    graph.add_edge(START, "prepare")
    graph.add_edge("memory", "system")
    graph.add_edge("system", "judge")
    name = f"episode[{pipeline}{', conversation' if conversation else ''}]"
    return graph.compile(checkpointer=checkpointer, name=name)
