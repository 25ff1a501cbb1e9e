"""The judge subgraph: every configured judge runs as a parallel branch (one `Send` each).

Alone (e.g. in Studio) it takes the case by reference: `{"benchmark", "case_id", "response": {"text": ...}}`.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from agents.gateway import ModelCallError
from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from benchmarks.case import Case
from graphs.context import EpisodeContext
from graphs.inputs import CaseReference, GraphInputError, case_from_input
from graphs.resources import resources_for


class JudgeInput(CaseReference, total=False):
    case: Case
    response: SystemResponse


class JudgeOutput(TypedDict):
    judgments: Annotated[list[JudgeResult], operator.add]


class JudgeState(JudgeInput, JudgeOutput, total=False):
    pass


class JudgeTask(TypedDict):
    judge_index: int
    case: Case
    response: SystemResponse


def dispatch(state: JudgeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["run_judge"]]:
    case = case_from_input(state, runtime.context or EpisodeContext())
    response = state.get("response")
    if response is None:
        raise GraphInputError('give the response to judge: {"response": {"text": "..."}} next to the case')
    response = SystemResponse.model_validate(response)
    judges = resources_for(runtime.context).judges
    tasks = [Send("run_judge", JudgeTask(judge_index=i, case=case, response=response)) for i in range(len(judges))]
    return Command(goto=tasks)


async def run_judge(task: JudgeTask, runtime: Runtime[EpisodeContext]) -> JudgeOutput:
    resources = resources_for(runtime.context)
    judge = resources.judges[task["judge_index"]]
    try:
        result = await judge.judge(task["case"], task["response"], resources.gateway)
    except ModelCallError as exc:  # the response stands; this judgment is recorded as failed
        result = JudgeResult(judge=judge.name, error=str(exc))
    return {"judgments": [result]}


def build_judge_graph():
    graph = StateGraph(JudgeState, context_schema=EpisodeContext, input_schema=JudgeInput, output_schema=JudgeOutput)
    graph.add_node("dispatch", dispatch)
    graph.add_node("run_judge", run_judge)
    graph.add_edge(START, "dispatch")
    return graph.compile(name="judge")
