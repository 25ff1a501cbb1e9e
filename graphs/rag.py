"""`rag`: one round of web search, then an answer with numbered citations checked in code.

    retrieve -> answer

`retrieve` writes search queries from the question *and* what the memory knows about the user,
searches the run's web with them and reads the best-ranked pages. With `gold_context` the case's
gold information replaces all of it (BESPOKE Table 6) and no queries are written. Every search and
fetch goes through the run's web (cache, replay, `web_log.jsonl`); page texts are kept in the
source store and state holds only references.

Writing the queries, searching and reading are one graph step: nothing lies between them that a
person would stop at (no interrupt; an episode resumed after a kill asks the planner again, which
the response cache, on by default, answers at no cost), and each LangGraph step with its checkpoint
cost about 0.5 ms per LLM call at zero latency (`atelier bench graph`, alternating A/B: a tenth of
a rag episode's framework time). The step's update holds the queries, the hits and the sources
read, so Studio and `atelier trace` show each.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import Field

from agents.citations import SourceRef
from agents.models.gateway import ModelCallError
from agents.planner import checked_queries, search_queries
from agents.response import SystemResponse
from agents.writer import write_answer
from benchmarks.common.degradation import Degradation, degradation
from graphs.context import EpisodeContext
from graphs.inputs import PipelineInput, PipelineOutput
from graphs.pipelines import AnswerBudgetOptions, GoldContextOptions, PipelineSpec, register_pipeline
from graphs.sources import WebHit, citation_degradations, read_web_sources, search_web
from graphs.start import meta_of, pipeline_options_of, pipeline_resources, start_inputs, view_of

PIPELINE = "rag"


class RagOptions(GoldContextOptions, AnswerBudgetOptions):
    max_queries: int = Field(default=3, ge=1, le=10, description="Search queries written for the question.")
    results_per_query: int = Field(default=5, ge=1, le=20, description="Results asked of each search.")
    max_pages: int = Field(default=4, ge=1, le=20, description="Pages fetched and read (best-ranked first).")
    page_chars: int = Field(default=3000, ge=200, le=50_000, description="Characters of each page the writer sees.")


class RagState(PipelineInput, PipelineOutput, total=False):
    queries: list[str]
    hits: list[WebHit]
    sources: list[SourceRef]
    degraded: list[Degradation]


def _options(runtime: Runtime[EpisodeContext]) -> RagOptions:
    return pipeline_options_of(runtime, PIPELINE, RagOptions)


async def retrieve(state: RagState, runtime: Runtime[EpisodeContext]) -> Command[Literal["answer"]]:
    state, update = await start_inputs(state, runtime, PIPELINE)
    gold = state.get("gold_context")
    if gold is not None:
        return Command(goto="answer", update={**update, "sources": gold.sources})  # all of it: it replaces search
    options = _options(runtime)
    resources = pipeline_resources(runtime, PIPELINE)
    query = view_of(state, runtime, PIPELINE).query
    degraded = []
    try:
        written = await search_queries(resources.gateway, query, state["user_context"].text, options.max_queries)
    except ModelCallError as exc:  # search the question as asked, and say so
        written = []
        degraded.append(
            degradation("step_fallback", "retrieve", f"search queries (searching the question as asked): {exc}")
        )
    if written or not degraded:
        queries, problems = checked_queries(written, query.text, "retrieve")
        degraded += problems
    else:
        queries = [query.text[:300]]
    web = await resources.open_web()
    hits, not_searched = await search_web(web, queries, options.results_per_query, options.max_pages, step="retrieve")
    sources, not_read = await read_web_sources(web, resources.sources, hits, step="retrieve")
    return Command(
        goto="answer",
        update={
            **update,
            "queries": queries,
            "hits": hits,
            "sources": sources,
            "degraded": degraded + not_searched + not_read,
        },
    )


async def answer(state: RagState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    options = _options(runtime)
    resources = pipeline_resources(runtime, PIPELINE)
    sources = state.get("sources", [])
    texts = [resources.sources.get(s.sha256)[: options.page_chars] for s in sources]
    query = view_of(state, runtime, PIPELINE).query
    report = await write_answer(
        resources.gateway, query, state["user_context"].text, sources, texts, options.answer_tokens
    )
    meta = meta_of(state, runtime, PIPELINE) | {
        "citations": report.stats,
        "queries": state.get("queries", []),
        "critical_path_calls": 1 if state.get("gold_context") is not None else 2,
    }
    return {
        "response": SystemResponse(
            text=report.text,
            citations=report.citations,
            meta=meta,
            degraded=[*state.get("degraded", []), *citation_degradations(report, "answer")],
        )
    }


def build_rag_graph():
    graph = StateGraph(
        RagState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("retrieve", retrieve)
    graph.add_node("answer", answer)
    graph.add_edge(START, "retrieve")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(PIPELINE, "one round of web search, answer with checked citations", build_rag_graph, RagOptions)
)
