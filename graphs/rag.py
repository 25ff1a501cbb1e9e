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

How it reads memory is `memory_access` (graphs/memory_tool.py): `upfront` (the default) gives both
steps the memory's context for the question; with `tool` neither gets an upfront context, and the
answer step is first offered `recall_memory(query)` — the model looks up what it wants to know about
the user, in turns, within `max_recalls` calls — then writes from what it recalled; `both` does
both. The response's meta counts and lists the recalls.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import Field

from atelier.agents.answerer import recall_before_answering
from atelier.agents.citations import SourceRef
from atelier.agents.models.gateway import ModelCallError
from atelier.agents.planner import checked_queries, search_queries
from atelier.agents.response import SystemResponse
from atelier.agents.writer import sources_section, write_answer
from atelier.benchmarks.case import CaseView
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput, memory_view
from atelier.graphs.memory_tool import (
    RECALL_MEMORY_TOOL,
    MemoryAccessOptions,
    Recall,
    recall_degradations,
    recall_memory,
    recalled_context,
    recalls_meta,
)
from atelier.graphs.pipelines import AnswerBudgetOptions, GoldContextOptions, PipelineSpec, register_pipeline
from atelier.graphs.resources import Resources
from atelier.graphs.sources import WebHit, citation_degradations, read_web_sources, search_web
from atelier.graphs.start import (
    meta_of,
    pipeline_context,
    pipeline_options_of,
    pipeline_resources,
    start_inputs,
    view_of,
)

PIPELINE = "rag"


class RagOptions(GoldContextOptions, AnswerBudgetOptions, MemoryAccessOptions):
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


def _upfront(state: RagState, options: RagOptions) -> str:
    """The memory's upfront context, unless the system reads memory only through the tool (a graph
    run alone recalls it in `start_inputs` whatever the mode)."""
    return state["user_context"].text if options.recalls_upfront else ""


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
        written = await search_queries(resources.gateway, query, _upfront(state, options), options.max_queries)
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
    if not sources:  # each failed search and page is recorded; the answer itself rests on nothing read
        degraded.append(
            degradation(
                "no_findings",
                "retrieve",
                f"{len(queries)} searches, {len(hits)} results, no page read: the answer rests on no source",
            )
        )
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
    view = view_of(state, runtime, PIPELINE)
    context_text, turns = _upfront(state, options), 0
    recalls: list[Recall] = []
    recall_degraded: list[Degradation] = []
    if options.recall_tool:
        owner = memory_view(state, pipeline_context(runtime, PIPELINE))
        recalls, turns, recall_degraded = await _recall(resources, view, owner, context_text, sources, options)
        context_text = recalled_context(context_text, recalls)
    report = await write_answer(resources.gateway, view.query, context_text, sources, texts, options.answer_tokens)
    meta = meta_of(state, runtime, PIPELINE) | {
        "citations": report.stats,
        "queries": state.get("queries", []),
        "critical_path_calls": (1 if state.get("gold_context") is not None else 2) + turns,
        **recalls_meta(options, recalls),
    }
    return {
        "response": SystemResponse(
            text=report.text,
            citations=report.citations,
            meta=meta,
            degraded=[*state.get("degraded", []), *recall_degraded, *citation_degradations(report, "answer")],
        )
    }


async def _recall(
    resources: Resources,
    view: CaseView,
    owner: CaseView,
    upfront: str,
    sources: list[SourceRef],
    options: MemoryAccessOptions,
) -> tuple[list[Recall], int, list[Degradation]]:
    """The answer step's lookups with `recall_memory`: the recalls (in the order asked), the model
    turns they took, and what degraded (a failed turn, a recall's own, no recall at all with `tool`)."""
    by_query: dict[str, Recall] = {}

    async def served(text: str) -> str:
        by_query[text] = await recall_memory(resources, view, text, owner)
        return by_query[text].text

    looked = await recall_before_answering(
        resources.gateway,
        view.query,
        upfront,
        RECALL_MEMORY_TOOL,
        served,
        options.max_recalls,
        material=[sources_section(sources)] if sources else [],
    )
    recalls = [by_query[lookup.query] for lookup in looked.lookups]
    return recalls, looked.turns, [*looked.degraded, *recall_degradations(options, recalls, "answer")]


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
