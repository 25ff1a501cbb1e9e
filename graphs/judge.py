"""The judge subgraph: every configured judge runs as a parallel branch (one `Send` each).

Judges see the full `Case` (gold included), read from the graph's store by `case_key`
(`graphs.case_store`); standalone (Studio), `benchmark` + `case_id` name it instead.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, NotRequired, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from agents.gateway import ModelCallError
from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from graphs.case_store import get_case, resolve_case, store_of
from graphs.context import EpisodeContext
from graphs.resources import resources_for


class JudgeInput(TypedDict):
    case_key: NotRequired[str]
    benchmark: NotRequired[str]
    case_id: NotRequired[str]
    response: SystemResponse


class JudgeOutput(TypedDict):
    judgments: Annotated[list[JudgeResult], operator.add]


class JudgeState(JudgeInput, JudgeOutput, total=False):
    pass


class JudgeTask(TypedDict):
    judge_index: int
    case_key: str
    response: SystemResponse


async def dispatch(state: JudgeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["run_judge"]]:
    judges = resources_for(runtime.context).judges
    key, _ = await resolve_case(state, store_of(runtime))
    tasks = [Send("run_judge", JudgeTask(judge_index=i, case_key=key, response=state["response"]))
             for i in range(len(judges))]
    return Command(goto=tasks)


async def run_judge(task: JudgeTask, runtime: Runtime[EpisodeContext]) -> JudgeOutput:
    resources = resources_for(runtime.context)
    judge = resources.judges[task["judge_index"]]
    try:
        case = await get_case(store_of(runtime), task["case_key"])
        result = await judge.judge(case, task["response"], resources.gateway)
    except ModelCallError as exc:  # the response stands; this judgment is recorded as failed
        result = JudgeResult(judge=judge.name, error=str(exc))
    return {"judgments": [result]}


def build_judge_graph():
    graph = StateGraph(JudgeState, context_schema=EpisodeContext, input_schema=JudgeInput, output_schema=JudgeOutput)
    graph.add_node("dispatch", dispatch)
    graph.add_node("run_judge", run_judge)
    graph.add_edge(START, "dispatch")
    return graph.compile(name="judge")
