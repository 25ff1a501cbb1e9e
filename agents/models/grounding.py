"""Models that search the web themselves: how they are asked, and what they return besides text.

A deep-research model API (OpenAI's `o3-deep-research` through the Responses API, Perplexity's
`sonar-deep-research`, any chat model with a built-in web search) answers with the sources it
cited and reports what its research cost. `Grounding` says how such a model is asked (which API,
which tools, streamed or not); `GroundedAnswer` is what comes back: the text, the provider's
citations and its search results, and the usage the provider reported beyond prompt and
completion tokens (reasoning tokens, citation tokens, web searches). The gateway
(`Gateway.grounded`) makes the call, caches and ledgers it like every other.

Two provider formats are read:

- chat completions (litellm): Perplexity's `citations` (URLs, numbered as the text's `[n]`) and
  `search_results` (URL, title, date, snippet), and its usage (`reasoning_tokens`,
  `citation_tokens`, `num_search_queries`); or the OpenAI chat `url_citation` annotations of a
  search model, numbered by first use;
- the Responses API (the OpenAI SDK: litellm 1.106.2's `aresponses`, and its bridge from chat
  completions to Responses-only models, import its MCP gateway, which needs `mcp>=2.2` where
  Atelier pins `mcp<2`): `url_citation` annotations of the output text with their spans,
  `web_search_call` output items, and `output_tokens_details.reasoning_tokens`.

Both may be streamed; a stream is collected into the same answer (Perplexity repeats its
citations on every chunk; the Responses API ends with `response.completed`, which carries the
whole response).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

GroundingApi = Literal["chat", "responses"]
# a reasoning model's thoughts before its answer (Perplexity's sonar-reasoning and deep research):
# litellm moves them out of a whole answer, not out of a stream's
_THINKING = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


@dataclass(frozen=True)
class Grounding:
    """How a model that researches is asked. `tools`: the Responses API's tools (its built-in
    `web_search_preview`); `stream`: read the answer as a stream (the answer is the same)."""

    api: GroundingApi = "chat"
    tools: tuple[dict[str, Any], ...] = ()
    stream: bool = False

    def identity(self) -> dict[str, Any]:
        """What changes the answer (what the response cache keys on): not whether it streamed."""
        return {"grounded": self.api, "tools": list(self.tools)}


class ProviderCitation(BaseModel):
    url: str
    title: str = ""
    number: int = Field(
        description="The [n] the provider's text cites it by (Perplexity), else its order of first use."
    )
    spans: list[tuple[int, int]] = Field(
        default_factory=list, description="Where the text cites it: (start, end) of each annotation (Responses API)."
    )


class ProviderUsage(BaseModel):
    """What the provider reported beyond prompt and completion tokens; None: it did not say."""

    reasoning_tokens: int | None = None
    citation_tokens: int | None = None
    search_calls: int | None = None


class GroundedAnswer(BaseModel):
    text: str
    citations: list[ProviderCitation] = Field(default_factory=list)
    search_results: list[dict[str, Any]] = Field(default_factory=list)
    usage: ProviderUsage = Field(default_factory=ProviderUsage)


@dataclass
class ProviderReply:
    """One provider answer, read: what the gateway caches, prices and ledgers."""

    answer: GroundedAnswer
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cost: float | None = None
    raw: Any = field(default=None, repr=False)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _numbered(urls: Iterable[tuple[str, str, tuple[int, int] | None]]) -> list[ProviderCitation]:
    """Citations numbered by first use of their URL, each with the spans that cite it."""
    by_url: dict[str, ProviderCitation] = {}
    for url, title, span in urls:
        if not url:
            continue
        cited = by_url.get(url)
        if cited is None:
            cited = by_url[url] = ProviderCitation(url=url, title=title or "", number=len(by_url) + 1)
        elif title and not cited.title:
            cited.title = title
        if span is not None:
            cited.spans.append(span)
    return list(by_url.values())


# --------------------------------------------------------------------------- chat completions


def chat_citations(
    citations: list[Any] | None, search_results: list[Any] | None, annotations: list[Any] | None
) -> list[ProviderCitation]:
    """Perplexity's `citations` (numbered as listed, titled from `search_results`), else the
    message's `url_citation` annotations."""
    titles = {_get(r, "url"): _get(r, "title") or "" for r in search_results or [] if _get(r, "url")}
    urls = [c if isinstance(c, str) else _get(c, "url") for c in citations or []]
    if any(urls):
        return [
            ProviderCitation(url=url, title=titles.get(url, ""), number=index)
            for index, url in enumerate(urls, 1)
            if url
        ]
    found = []
    for annotation in annotations or []:
        if _get(annotation, "type") != "url_citation":
            continue
        cited = _get(annotation, "url_citation") or annotation
        start, end = _get(cited, "start_index"), _get(cited, "end_index")
        span = (int(start), int(end)) if isinstance(start, int) and isinstance(end, int) else None
        found.append((_get(cited, "url") or "", _get(cited, "title") or "", span))
    return _numbered(found)


def chat_usage(usage: Any) -> ProviderUsage:
    """Reasoning and citation tokens and web searches in a chat usage block (Perplexity's fields,
    as litellm keeps them, or OpenAI's details)."""
    if usage is None:
        return ProviderUsage()
    details = _get(usage, "completion_tokens_details")
    reasoning = _int_or_none(_get(details, "reasoning_tokens")) if details is not None else None
    if reasoning is None:
        reasoning = _int_or_none(_get(usage, "reasoning_tokens"))
    searches = _int_or_none(_get(usage, "num_search_queries"))
    prompt_details = _get(usage, "prompt_tokens_details")
    if searches is None and prompt_details is not None:
        searches = _int_or_none(_get(prompt_details, "web_search_requests"))
    return ProviderUsage(
        reasoning_tokens=reasoning, citation_tokens=_int_or_none(_get(usage, "citation_tokens")), search_calls=searches
    )


def read_chat(response: Any) -> ProviderReply:
    """A litellm chat completion (not streamed)."""
    choice = response.choices[0]
    message = choice.message
    usage = getattr(response, "usage", None)
    citations = getattr(response, "citations", None)
    search_results = getattr(response, "search_results", None) or []
    hidden = getattr(response, "_hidden_params", None) or {}
    return ProviderReply(
        answer=GroundedAnswer(
            text=_THINKING.sub("", getattr(message, "content", None) or "", count=1),
            citations=chat_citations(citations, search_results, getattr(message, "annotations", None)),
            search_results=[dict(r) for r in search_results if isinstance(r, dict)],
            usage=chat_usage(usage),
        ),
        prompt_tokens=int(_get(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(_get(usage, "completion_tokens", 0) or 0),
        finish_reason=getattr(choice, "finish_reason", None),
        cost=hidden.get("response_cost"),
        raw=response,
    )


async def read_chat_stream(stream: AsyncIterator[Any], messages: list[dict[str, Any]]) -> ProviderReply:
    """A streamed litellm chat completion, collected. Perplexity sends its citations and search
    results with every chunk (the last ones count) and its usage with the last; litellm's stream
    keeps its cost and reasoning tokens, not its count of searches (then `search_calls` is None)."""
    import litellm

    chunks: list[Any] = []
    citations: list[Any] | None = None
    search_results: list[Any] | None = None
    annotations: list[Any] = []
    async for chunk in stream:
        chunks.append(chunk)
        citations = getattr(chunk, "citations", None) or citations
        search_results = getattr(chunk, "search_results", None) or search_results
        for choice in getattr(chunk, "choices", None) or []:
            annotations += getattr(choice.delta, "annotations", None) or []
    built = litellm.stream_chunk_builder(chunks, messages=messages)
    if built is None:
        raise ValueError("the provider's stream ended with no chunk")
    reply = read_chat(built)
    usage = next((c.usage for c in reversed(chunks) if getattr(c, "usage", None) is not None), None)
    reply.answer.citations = chat_citations(citations, search_results, annotations)
    reply.answer.search_results = [dict(r) for r in search_results or [] if isinstance(r, dict)]
    reply.answer.usage = chat_usage(usage or getattr(built, "usage", None))
    if reply.cost is None:
        try:
            reply.cost = litellm.completion_cost(completion_response=built)
        except Exception:  # noqa: BLE001 - litellm has no price for this model: the cost is unknown
            reply.cost = None
    return reply


# --------------------------------------------------------------------------- the Responses API


def read_responses(response: Any, model: str) -> ProviderReply:
    """An OpenAI SDK `Response` (the Responses API): the output text, its `url_citation`
    annotations, `web_search_call` items, usage and litellm's price for it."""
    texts: list[str] = []
    found: list[tuple[str, str, tuple[int, int] | None]] = []
    searches = 0
    for item in _get(response, "output") or []:
        kind = _get(item, "type")
        if kind == "web_search_call":
            searches += 1
        if kind != "message":
            continue
        for part in _get(item, "content") or []:
            if _get(part, "type") != "output_text":
                continue
            offset = sum(len(t) for t in texts)
            texts.append(_get(part, "text") or "")
            for annotation in _get(part, "annotations") or []:
                if _get(annotation, "type") != "url_citation":
                    continue
                start, end = _get(annotation, "start_index"), _get(annotation, "end_index")
                span = (
                    (offset + int(start), offset + int(end))
                    if isinstance(start, int) and isinstance(end, int)
                    else None
                )
                found.append((_get(annotation, "url") or "", _get(annotation, "title") or "", span))
    usage = _get(response, "usage")
    details = _get(usage, "output_tokens_details") if usage is not None else None
    status = _get(response, "status")
    return ProviderReply(
        answer=GroundedAnswer(
            text="".join(texts),
            citations=_numbered(found),
            usage=ProviderUsage(
                reasoning_tokens=_int_or_none(_get(details, "reasoning_tokens")) if details is not None else None,
                search_calls=searches,
            ),
        ),
        prompt_tokens=int(_get(usage, "input_tokens", 0) or 0),
        completion_tokens=int(_get(usage, "output_tokens", 0) or 0),
        finish_reason="length" if status == "incomplete" else ("stop" if status == "completed" else status),
        cost=_responses_cost(response, model),
        raw=response,
    )


def _responses_cost(response: Any, model: str) -> float | None:
    """litellm's price of a Responses API answer (its tokens; web search calls where its price map
    has a price for them), None when it has none."""
    import litellm
    from litellm.types.llms.openai import ResponsesAPIResponse

    try:
        priced = ResponsesAPIResponse.model_validate(
            response.model_dump() if hasattr(response, "model_dump") else response
        )
        return float(litellm.completion_cost(completion_response=priced, model=model))
    except Exception:  # noqa: BLE001 - no price for this model (or a response litellm cannot read): unknown
        return None


async def read_responses_stream(stream: AsyncIterator[Any], model: str) -> ProviderReply:
    """A streamed Responses API answer: its `response.completed` event carries the whole response.
    A stream that ends otherwise (`response.failed`, `error`, cut off) is an error."""
    last = None
    async for event in stream:
        kind = _get(event, "type")
        if kind in ("response.completed", "response.incomplete"):
            return read_responses(_get(event, "response"), model)
        if kind in ("response.failed", "error"):
            error = _get(_get(event, "response"), "error") or _get(event, "message") or event
            raise ResponsesStreamError(f"the provider's stream reported {kind}: {error}")
        last = kind
    raise ResponsesStreamError(f"the provider's stream ended without response.completed (last event: {last})")


class ResponsesStreamError(RuntimeError):
    """A streamed Responses API answer that never completed."""


def responses_input(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as the Responses API takes them: the system prompt as `instructions`, the rest as input."""
    system = [str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer")]
    rest = [
        {"role": m["role"], "content": m.get("content") or ""}
        for m in messages
        if m.get("role") not in ("system", "developer")
    ]
    return ("\n\n".join(system) or None), rest
