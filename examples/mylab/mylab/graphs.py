"""draft_revise: a pipeline of its own — draft an answer, then revise it to fit the user.

A pipeline is any compiled LangGraph graph that takes `PipelineInput` (the case by reference and,
inside an episode, the memory's `UserContext`) and returns `{"response": SystemResponse}`; a recipe
names its factory (`pipeline = "mylab.graphs:build"`). `start_inputs` completes the inputs when
the graph runs alone (in Studio: `{"benchmark": "sample", "case_id": "q01"}`); every model call
goes through the run's gateway (cache, ledger, retries), as role `system`.
"""

from __future__ import annotations

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from atelier.agents.prompts import Section, build_messages, user_sections
from atelier.agents.response import SystemResponse
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.start import pipeline_resources, start_inputs, view_of

ROLE = "You are a careful assistant who answers one particular user, in the way that suits them."


class DraftReviseState(PipelineInput, PipelineOutput, total=False):
    draft: str


async def draft(state: DraftReviseState, runtime: Runtime[EpisodeContext]) -> dict:
    state, update = await start_inputs(state, runtime)
    view = view_of(state, runtime)
    gateway = pipeline_resources(runtime).gateway
    messages = build_messages(
        ROLE, user_sections(view.query, state["user_context"].text), "Draft a short answer to the question."
    )
    return {**update, "draft": await gateway.text("system", messages)}


async def revise(state: DraftReviseState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    view = view_of(state, runtime)
    gateway = pipeline_resources(runtime).gateway
    sections = [*user_sections(view.query, state["user_context"].text), Section("Your draft", state["draft"], True)]
    text = await gateway.text(
        "system",
        build_messages(ROLE, sections, "Revise the draft so that its content, depth and tone fit this user."),
    )
    return {
        "response": SystemResponse(text=text, meta={"pipeline": "draft_revise", "draft_chars": len(state["draft"])})
    }


def build():
    """Draft an answer, then revise it to fit the user (two model calls)."""
    graph = StateGraph(
        DraftReviseState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("draft", draft)
    graph.add_node("revise", revise)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "revise")
    return graph.compile(name="draft_revise")


build.uses_web = False  # it never searches: a run's preflight need not check the web for it
