"""`deep_research`: a graph a newcomer can read in Studio.

    clarify -> [ask_user: interrupt] -> write_brief -> plan -> [review_plan: interrupt]
          -> researcher x N in parallel (Send; a subgraph: search -> read -> take_notes -> assess)
          -> reflect -> (researcher x M -> reflect)* -> write_report

  design = "agentic" (graphs/deep_research/agentic.py): after the brief,
    supervisor (tools: conduct_research, think, research_complete) -> [review_plan: interrupt]
          -> agent_researcher x N in parallel (Send; a subgraph: act -> tools -> act ... -> compress)
          -> supervisor -> ... -> write_report

- clarify: a person (Studio) or the simulated user (runs) answers through LangGraph `interrupt`
  with `agents.clarify.ClarifyRequest` / `ClarifyAnswers`; a run with no one to answer skips the
  step and records it in `response.meta["clarify"]`.
- personalization is data: the brief carries the user's facts and the report's form; sub-topics
  say why they matter to this user; queries use the user's specifics; the writer gets the form.
- citations are checked in code: each note is tied to the source it came from; the report may
  cite only the sources read; any other citation is removed and counted (`meta["citations"]`).
- gold_context (BESPOKE Table 6): researchers read the case's gold information instead of the web.
- one URL is fetched and noted once per episode, whichever researcher asked (graphs/deep_research/reads.py).
- review_plan: a person (Studio) or the simulated user accepts or edits the plan (graphs/deep_research/review.py).
"""

from __future__ import annotations

from langgraph.graph import START, StateGraph

from atelier.graphs.context import EpisodeContext
from atelier.graphs.deep_research import agentic, nodes
from atelier.graphs.deep_research.nodes import PIPELINE, DeepResearchOptions
from atelier.graphs.deep_research.review import review_plan
from atelier.graphs.deep_research.state import (
    AgentResearcherState,
    AgentTask,
    DeepResearchState,
    ResearcherOutput,
    ResearcherState,
    ResearchTask,
)
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.pipelines import PipelineSpec, register_pipeline


def build_researcher_graph():
    graph = StateGraph(
        ResearcherState, context_schema=EpisodeContext, input_schema=ResearchTask, output_schema=ResearcherOutput
    )
    graph.add_node("search", nodes.search)
    graph.add_node("read", nodes.read)
    graph.add_node("take_notes", nodes.take_source_notes)
    graph.add_node("assess", nodes.assess)
    graph.add_edge(START, "search")
    return graph.compile(name="researcher")


def build_agent_researcher_graph():
    """design = "agentic": a ReAct researcher (act -> tools -> act ... -> compress)."""
    graph = StateGraph(
        AgentResearcherState, context_schema=EpisodeContext, input_schema=AgentTask, output_schema=ResearcherOutput
    )
    graph.add_node("act", agentic.act)
    graph.add_node("tools", agentic.tools)
    graph.add_node("compress", agentic.compress)
    graph.add_edge(START, "act")
    return graph.compile(name="agent_researcher")


def build_deep_research_graph():
    graph = StateGraph(
        DeepResearchState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("clarify", nodes.clarify)
    graph.add_node("ask_user", nodes.ask_user)
    graph.add_node("write_brief", nodes.write_brief)
    graph.add_node("plan", nodes.plan)
    graph.add_node("supervisor", agentic.supervisor)
    graph.add_node("review_plan", review_plan)
    graph.add_node("researcher", build_researcher_graph())
    graph.add_node("agent_researcher", build_agent_researcher_graph())
    graph.add_node("reflect", nodes.reflect)
    graph.add_node("write_report", nodes.write_report)
    graph.add_edge(START, "clarify")
    graph.add_edge("researcher", "reflect")
    graph.add_edge("agent_researcher", "supervisor")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(
        PIPELINE,
        "clarify, brief, plan (or a tool-calling supervisor), parallel researchers, reflect on gaps, report with "
        "checked citations",
        build_deep_research_graph,
        DeepResearchOptions,
        variant_option="design",  # `deep_research:agentic` beside `deep_research:plan` (atelier bench graph)
    )
)
