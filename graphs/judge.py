"""The judge subgraph: every configured judge runs as a parallel branch (one `Send` each).

A judge gets the run's gateway (its own model roles), the run's web (to read cited sources through
the web cache) and the artifact store (criteria and rubrics generated once and reused). Judges that
compare two systems' responses (LaMP-QA pairwise) are not run here: the runner runs them once both
responses exist (`runs.judging`).

Alone (e.g. in Studio) it takes the case by reference: `{"benchmark", "case_id", "response": {"text": ...}}`.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from typing_extensions import TypedDict

from atelier.agents.judges.base import JudgeEnv, JudgeResult
from atelier.agents.judges.contract import held_to_contract
from atelier.agents.judges.store import ArtifactStore
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.data_files import cache_dir
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import CaseReference, GraphInputError, case_from_input
from atelier.graphs.resources import Resources, resources_for

ARTIFACTS_DIR = "judge_artifacts"  # in the run folder and in Atelier's cache


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


def artifact_store(context: EpisodeContext) -> ArtifactStore:
    """The run folder's store (so the run is self-contained) backed by the cache's (so later runs
    reuse), unless the run has no response cache (`[cache] enabled = false`, as the cost forecast's
    dry run): then nothing made by an earlier run is reused, as no earlier answer is."""
    directories = [Path(context.run_dir) / ARTIFACTS_DIR] if context.run_dir else []
    shared = [cache_dir() / ARTIFACTS_DIR] if context.cache_dir is not None or not directories else []
    return ArtifactStore([*directories, *shared])


def judge_env(resources: Resources) -> JudgeEnv:
    return JudgeEnv(
        gateway=resources.gateway,
        web=resources.open_web,
        store=artifact_store(resources.context),
        sources=resources.sources.get,
    )


def dispatch(state: JudgeState, runtime: Runtime[EpisodeContext]) -> Command[Literal["run_judge"]]:
    case = case_from_input(state, runtime.context or EpisodeContext())
    response = state.get("response")
    if response is None:
        raise GraphInputError('give the response to judge: {"response": {"text": "..."}} next to the case')
    response = SystemResponse.model_validate(response)
    judges = resources_for(runtime.context).judges
    tasks = [
        Send("run_judge", JudgeTask(judge_index=i, case=case, response=response))
        for i, judge in enumerate(judges)
        if not judge.comparative
    ]
    return Command(goto=tasks)


async def run_judge(task: JudgeTask, runtime: Runtime[EpisodeContext]) -> JudgeOutput:
    resources = resources_for(runtime.context)
    judge = resources.judges[task["judge_index"]]
    judgment = judge.judge(task["case"], task["response"], judge_env(resources))
    return {"judgments": [await held_to_contract(judge, judgment)]}


def build_judge_graph():
    graph = StateGraph(JudgeState, context_schema=EpisodeContext, input_schema=JudgeInput, output_schema=JudgeOutput)
    graph.add_node("dispatch", dispatch)
    # fed by Send, it takes a JudgeTask; langgraph's stubs want every node to take the state
    graph.add_node("run_judge", cast(Any, run_judge))
    graph.add_edge(START, "dispatch")
    return graph.compile(name="judge")
