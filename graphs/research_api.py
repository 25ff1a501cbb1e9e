"""`research_api`: a model that researches the web itself is the system — a deep-research model API.

    research -> read_cited

`research` asks the `researcher` role's model (OpenAI's `o3-deep-research` through the Responses
API with its web search tool, Perplexity's `sonar-deep-research`, Gemini Deep Research through the
Interactions API, any litellm model with a built-in web search) with the user's context in the
prompt, as `direct` does, through the gateway's grounded call (`Gateway.grounded`): the answer comes back with the citations its
provider returned, and the call's reasoning tokens, web searches and cost are in the ledger.
`read_cited` fetches every cited URL through the run's web (recorded, replayable, in
`web_log.jsonl`) and keeps each page's text in the run's source store, so each citation carries
the sha256 of what the page said and PQR's R reads exactly that. A cited page that cannot be read
stays a citation (the report cites it), without a sha256, and is a `fetch_failed` degradation; an
answer with no citation at all is `no_findings` (the scripted and local models search nothing).

The report is the provider's text with its citations numbered: Perplexity's `[n]` markers already
name its `citations` (or, in the API's newer form, its `search_results`); the Responses API's
annotations get a `[n]` after each annotated span (at the end of the word the span ends in),
numbered by first use. A marker that names no citation, and a span that points nowhere in the text
(negative, reversed, past its end), are removed and counted (`citation_removed`), never left
dangling or placed elsewhere. The report ends with the list of cited sources, each with what was read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import Field, model_validator

from atelier.agents.answerer import answer_messages
from atelier.agents.models.grounding import GroundedAnswer, Grounding
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.pipelines import PipelineOptions, PipelineSpec, register_pipeline
from atelier.graphs.sources import CitedPage, CitedUrl, read_cited_pages
from atelier.graphs.start import meta_of, pipeline_options_of, pipeline_resources, start_inputs, view_of

PIPELINE = "research_api"
ROLE = "researcher"
WEB_SEARCH_TOOL = {"type": "web_search_preview"}


class ResearchApiOptions(PipelineOptions):
    api: Literal["chat", "responses", "interactions"] = Field(
        default="chat",
        description="How the researcher model is asked: chat completions (Perplexity, search models), OpenAI's "
        "Responses API (o3-deep-research, o4-mini-deep-research; model openai/<name>) or Gemini's Interactions API "
        "(Gemini Deep Research; model gemini/<agent>, always in the background).",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None,
        description="The Responses API's tools (unset: its built-in web search, web_search_preview); api = 'responses' only.",
    )
    stream: bool = Field(default=False, description="Read the model's answer as a stream (the same answer).")
    background: bool = Field(
        default=False,
        description="api = 'responses': run the request in the background and poll it until it ends (within the "
        "researcher's timeout_s; cancelled on the server when that runs out): the way OpenAI advises calling "
        "o3-deep-research, whose answers take minutes.",
    )
    poll_s: float = Field(default=2.0, gt=0, le=60, description="Seconds between polls of a background response.")

    @model_validator(mode="after")
    def _tools_need_responses(self) -> ResearchApiOptions:
        if self.api != "responses" and self.tools is not None:
            raise ValueError("tools are the Responses API's: set api = 'responses' (chat models take extra params)")
        if self.api == "chat" and self.background:
            raise ValueError("background is the Responses API's (the Interactions API's always): set api = 'responses'")
        return self

    def grounding(self) -> Grounding:
        tools = tuple(self.tools if self.tools is not None else [WEB_SEARCH_TOOL]) if self.api == "responses" else ()
        return Grounding(api=self.api, tools=tools, stream=self.stream, background=self.background, poll_s=self.poll_s)


class ResearchApiState(PipelineInput, PipelineOutput, total=False):
    answer: GroundedAnswer


def _options(runtime: Runtime[EpisodeContext]) -> ResearchApiOptions:
    return pipeline_options_of(runtime, PIPELINE, ResearchApiOptions)


async def research(state: ResearchApiState, runtime: Runtime[EpisodeContext]) -> Command[Literal["read_cited"]]:
    state, update = await start_inputs(state, runtime, PIPELINE)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    messages = answer_messages(view_of(state, runtime, PIPELINE), state["user_context"].text, research=True)
    answer = await gateway.grounded(ROLE, messages, _options(runtime).grounding())
    return Command(goto="read_cited", update={**update, "answer": answer})


_MARKER = re.compile(r"[ \t]?\[(\d{1,3})\]")  # with the space before it, removed with it


@dataclass(frozen=True)
class NumberedText:
    """The report's text with its citations' markers; what pointed nowhere and was removed."""

    text: str
    dangling: list[int]  # markers naming no citation, removed from the text
    bad_spans: list[tuple[int, int]]  # annotation spans outside the text, no marker placed

    def degradations(self) -> list[Degradation]:
        found = []
        if self.dangling:
            numbers = ", ".join(f"[{n}]" for n in sorted(set(self.dangling)))
            found.append(
                degradation(
                    "citation_removed",
                    "read_cited",
                    f"the provider's text cited {numbers}, which name none of its citations: removed",
                    count=len(self.dangling),
                )
            )
        if self.bad_spans:
            spans = ", ".join(f"{start}-{end}" for start, end in self.bad_spans[:5])
            found.append(
                degradation(
                    "citation_removed",
                    "read_cited",
                    f"the provider's annotations pointed outside its text ({spans}): no marker placed",
                    count=len(self.bad_spans),
                )
            )
        return found


def _word_end(text: str, at: int) -> int:
    """`at`, or the end of the word it falls inside: a marker never splits a word."""
    while 0 < at < len(text) and text[at - 1].isalnum() and text[at].isalnum():
        at += 1
    return at


def numbered_text(answer: GroundedAnswer) -> NumberedText:
    """The provider's text with each annotated span followed by its citation's `[n]`; text whose
    citations carry no spans (Perplexity's) has its markers already, and those naming no citation
    are removed. What pointed nowhere is counted."""
    text = answer.text
    spans = [(start, end, cited.number) for cited in answer.citations for start, end in cited.spans]
    if not spans:
        numbers = {cited.number for cited in answer.citations}
        dangling: list[int] = []

        def keep(match: re.Match[str]) -> str:
            if int(match.group(1)) in numbers:
                return match.group(0)
            dangling.append(int(match.group(1)))
            return ""

        return NumberedText(_MARKER.sub(keep, text), dangling, [])
    bad = [(start, end) for start, end, _ in spans if not 0 <= start <= end <= len(text)]
    # from the end, so each insertion leaves the positions before it as they were
    marks = sorted(
        ((_word_end(text, end), number) for start, end, number in spans if 0 <= start <= end <= len(text)),
        reverse=True,
    )
    for at, number in marks:
        text = f"{text[:at]} [{number}]{text[at:]}"
    return NumberedText(text, [], bad)


async def read_cited(state: ResearchApiState, runtime: Runtime[EpisodeContext]) -> Command[Literal["__end__"]]:
    resources = pipeline_resources(runtime, PIPELINE)
    answer = state["answer"]
    cited = [
        CitedUrl(url=c.url, title=c.title, number=c.number) for c in sorted(answer.citations, key=lambda c: c.number)
    ]
    pages: list[CitedPage] = []
    degraded: list[Degradation] = []
    if cited:
        pages, degraded = await read_cited_pages(
            await resources.open_web(), resources.sources, cited, step="read_cited"
        )
    else:
        degraded.append(degradation("no_findings", "research", "the model's answer cites no source"))
    numbered = numbered_text(answer)
    degraded += numbered.degradations()
    text = numbered.text
    if pages:
        text = f"{text.rstrip()}\n\n## Sources\n" + "\n".join(p.line() for p in pages)
    options = _options(runtime)
    unread = [p.cited.url for p in pages if p.read is None]
    meta = meta_of(state, runtime, PIPELINE) | {
        "api": options.api,
        "stream": options.stream,
        "background": options.background,
        "citations": {"cited": len(pages), "read": len(pages) - len(unread), "unread": unread},
        "search_results": len(answer.search_results),
        "provider_usage": answer.usage.model_dump(),
        "critical_path_calls": 1,
    }
    response = SystemResponse(text=text, citations=[p.citation() for p in pages], meta=meta, degraded=degraded)
    return Command(goto=END, update={"response": response})  # type: ignore[arg-type]  # langgraph types END as str


def build_research_api_graph():
    graph = StateGraph(
        ResearchApiState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("research", research)
    graph.add_node("read_cited", read_cited)
    graph.add_edge(START, "research")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(
        PIPELINE,
        "a model that researches the web itself (deep-research API); its citations fetched, stored and checked",
        build_research_api_graph,
        ResearchApiOptions,
        research_roles=(ROLE,),
    )
)
