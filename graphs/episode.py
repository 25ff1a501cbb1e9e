"""`episode`: the unit a run executes per case and system —
prepare the system's view -> memory (ingest, recall) -> system pipeline -> judges.

The system's subgraphs only ever receive the `CaseView` (no gold fields exist on it), and without
its history events: a system sees the history only through its memory backend's `user_context`,
which is what makes memory ablations mean something. The full `Case` stays in the graph's store
(`graphs.case_store`); state carries its `case_key`, so checkpoints stay small.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from benchmarks.case import CaseView
from graphs.case_store import resolve_case, store_of
from graphs.context import EpisodeContext
from graphs.judge import build_judge_graph
from graphs.memory import build_memory_graph
from graphs.pipelines import PIPELINES
from memory.base import UserContext


class EpisodeInput(TypedDict, total=False):
    case_key: str  # the case, kept in the graph's store (graphs.case_store.put_case)
    benchmark: str  # or: benchmark + case_id, loaded with the benchmark's defaults (handy in Studio)
    case_id: str


class EpisodeOutput(TypedDict, total=False):
    case_key: str
    view: CaseView  # without history events (see the module docstring)
    user_context: UserContext
    response: SystemResponse
    judgments: Annotated[list[JudgeResult], operator.add]


class EpisodeState(EpisodeInput, EpisodeOutput, total=False):
    pass


async def prepare(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["memory"]]:
    key, case = await resolve_case(state, store_of(runtime))
    setting = (runtime.context or EpisodeContext()).system.setting
    view = case.view(setting).model_copy(update={"history": []})
    return Command(goto="memory", update={"case_key": key, "view": view})


def build_episode_graph(pipeline: str = "direct", checkpointer=None, store=None):
    graph = StateGraph(EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput)
    graph.add_node("prepare", prepare)
    graph.add_node("memory", build_memory_graph())
    graph.add_node("system", PIPELINES.get(pipeline).build())
    graph.add_node("judge", build_judge_graph())
    graph.add_edge(START, "prepare")
    graph.add_edge("memory", "system")
    graph.add_edge("system", "judge")
    return graph.compile(checkpointer=checkpointer, store=store, name=f"episode[{pipeline}]")
