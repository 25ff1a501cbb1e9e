"""Systems and a judge whose personalization is known, for the counterfactual controls (issue 54).

Named in recipes by `module:attr`, as a researcher's own would be:

- `tests.personalization_doubles:facet_echo` answers with the user context its memory gave it
  (under the `persona` setting: the persona's facets, one per line): its answers rest wholly on
  the user's own context;
- `tests.personalization_doubles:generic` ignores the context: an answer to the query alone, with a
  filler word drawn by the case (so answers, and the judge's noise on them, differ from case to case);
- `tests.personalization_doubles:leaky` answers with its context and, besides, one facet of the
  case's *own* user read from the full case by reference (what no system may do): in a control
  episode that is a fact it was never given;
- `tests.personalization_doubles:FacetOverlap` scores 0.8 x the share of the own user's facet
  values the answer holds + 0.2 x a hash of the answer in [0, 1) (a judge's noise), with the share
  as the criterion `overlap`.

None calls a model.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from atelier.agents.judges.base import Judge, JudgeConfig, JudgeEnv, JudgeResult
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput, case_from_input
from atelier.graphs.start import pipeline_context, start_inputs, view_of

FILLER = ("briefly", "overall", "in short", "to sum up", "all told", "in brief", "at a glance", "on balance")


def _graph(name: str, answer):
    async def node(state: PipelineInput, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        state, update = await start_inputs(state, runtime)
        text = answer(state, runtime)
        return {**update, "response": SystemResponse(text=text, meta={"pipeline": name})}

    graph = StateGraph(
        PipelineInput, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("answer", node)
    graph.add_edge(START, "answer")
    compiled = graph.compile(name=name)
    return compiled


def _echo(state: dict[str, Any], runtime: Runtime[EpisodeContext]) -> str:
    return f"For you: {view_of(state, runtime).query.text}\n{state['user_context'].text}"


def _generic(state: dict[str, Any], runtime: Runtime[EpisodeContext]) -> str:
    view = view_of(state, runtime)
    word = random.Random(view.id).choice(FILLER)
    return f"A general answer to: {view.query.text} ({word})"


def _leaky(state: dict[str, Any], runtime: Runtime[EpisodeContext]) -> str:
    case = case_from_input(state, pipeline_context(runtime))  # the full case: never a system's to read
    planted = (
        dict(case.persona.facets()).get("Basic Attributes > Family Status > Family Members and Relationships", "")
        if case.persona
        else ""
    )
    return f"{_echo(state, runtime)}\nAbout your family: {planted}"


def facet_echo():
    return _graph("facet_echo", _echo)


def generic():
    return _graph("generic", _generic)


def leaky():
    return _graph("leaky", _leaky)


for factory in (facet_echo, generic, leaky):
    factory.uses_web = False  # type: ignore[attr-defined]


def overlap(case: Case, text: str) -> float:
    """The share of the case's own persona facet values the text holds (casefolded)."""
    values = [v.casefold() for _, v in (case.persona.facets() if case.persona else []) if len(v) > 12]
    return sum(v in text.casefold() for v in values) / len(values) if values else 0.0


def noise(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


class FacetOverlapConfig(JudgeConfig):
    pass


class FacetOverlap(Judge):
    name = "facet_overlap"
    config_model = FacetOverlapConfig
    scale = "0-1"

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        share = overlap(case, response.text)
        return self.result(0.8 * share + 0.2 * noise(response.text), criteria={"overlap": share})
