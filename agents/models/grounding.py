"""Models that search the web themselves: how they are asked, and what they return besides text.

A deep-research model API (OpenAI's `o3-deep-research` through the Responses API, Perplexity's
`sonar-deep-research`, any chat model with a built-in web search) answers with the sources it
cited and reports what its research cost. `Grounding` says how such a model is asked (which API,
which tools, streamed or not, in the background or not); `GroundedAnswer` is what comes back: the
text, the provider's citations and its search results, and the usage the provider reported beyond
prompt and completion tokens (reasoning tokens, citation tokens, billed web searches). The gateway
(`Gateway.grounded`) makes the call, caches and ledgers it like every other; the provider calls
themselves are here (`perplexity_call`, `responses_call`), each in one place.

The provider formats read (each as its public reference describes it):

- Perplexity's chat completions (`perplexity/<model>`, called with the OpenAI SDK at Perplexity's
  base URL: litellm 1.106.2 drops `citation_tokens`, `num_search_queries` and the `cost` block from
  a stream and mistypes the cost block of a whole answer). The text's `[n]` markers name the n-th
  entry of `citations` (URLs) when the answer has them, else of `search_results` (`title`, `url`,
  `date`, `snippet`: the API's newer form, where `citations` may be absent); usage carries
  `reasoning_tokens`, `citation_tokens`, `num_search_queries` and `cost` (the provider's own bill:
  `input_tokens_cost`, ..., `search_queries_cost`, `total_cost`). A stream repeats citations and
  search results on its chunks and sends usage on the last (perplexity-py's `StreamChunk`,
  `UsageInfo`);
- other chat completions (litellm): the OpenAI chat `url_citation` annotations of a search model,
  numbered by first use;
- OpenAI's Responses API (the OpenAI SDK: litellm 1.106.2's `aresponses`, and its bridge from chat
  completions to Responses-only models, import its MCP gateway, which needs `mcp>=2.2` where
  Atelier pins `mcp<2`): `url_citation` annotations of the output text with their spans,
  `web_search_call` output items whose `action.type` is `search` (billed), `open_page` or
  `find_in_page` (not billed), `output_tokens_details.reasoning_tokens`. A whole answer, a stream
  (ending with `response.completed`, which carries the whole response), or a background response
  (`background: true`: created `queued` or `in_progress`, polled with `GET /responses/{id}` until it
  ends, within the call's timeout `timeout_s`) — openai-python's `Response`,
  `ResponseFunctionWebSearch` and `ResponseStatus`. A background response still `queued` or
  `in_progress` when the timeout nears its end (the last fifth of it, at most 10 s, is kept for
  this) is cancelled on the server and fails the call as an answer that did not arrive whole,
  named by that status and the timeout (`StillRunning`), and is not asked again: a new request
  would start, and bill, a new job needing as long. Only a response `completed` is whole (one
  `incomplete` is read, as cut or filtered): a stream that ends without its terminal event
  (`response.completed`, `.incomplete` or `.failed`) is cut off unless the request ran in the
  background, and only a background request is polled (a response asked for in the foreground may
  not be kept on the server): one read `queued` or `in_progress` — whole or as a stream's terminal
  event — is an answer that did not arrive whole, named by its status and not asked again (the
  endpoint answers the next request the same way). Any other status (`failed`, `cancelled`,
  `requires_action`, none at all) is an answer that did not arrive whole too.

- Gemini's Interactions API (`api = "interactions"`, model `gemini/<agent>`, e.g.
  `gemini/deep-research-pro-preview-12-2025`: Gemini Deep Research, which only this API serves),
  over HTTP: created with `background: true`, polled with `GET /interactions/{id}` while
  `in_progress` and cancelled (`POST /interactions/{id}/cancel`) when the wait runs out; the
  report is the text of its last `model_output` step, whose `url_citation` annotations give their
  spans in bytes of that text; `google_search_call` steps are its searches (one per query), usage
  its `total_input_tokens`, `total_output_tokens` and `total_thought_tokens` (google-genai's
  `Interaction`, `ModelOutputStep`, `TextContent`, `URLCitation`, `GoogleSearchCallStep`, `Usage`).
  The API is in beta: its shape is read as google-genai 2.25 describes it.

A cited URL's tracking parameters (`utm_*`, as OpenAI adds `?utm_source=openai`) are dropped: the
page it names is read, in the sandbox web's corpus too.

Costs are counted once: tokens at litellm's prices (or the role's own), web searches at the number
the provider billed times litellm's price per search (or the role's own `search_cost_per_call`,
which replaces it, never adds to it); Perplexity's own `cost` block, when it sends one, is the bill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, Field

from atelier.agents.models.answer_contract import (
    IncompleteAnswer,
    answer_or_reasoning,
    broke_off,
    choice_finish,
    read_finish,
    with_a_choice,
)

if TYPE_CHECKING:
    from atelier.agents.models.settings import ModelSettings

GroundingApi = Literal["chat", "responses", "interactions"]
# a reasoning model's thoughts before its answer (Perplexity's sonar-reasoning and deep research)
_THINKING = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
PERPLEXITY_BASE_URL = "https://api.perplexity.ai"
PERPLEXITY_KEYS = ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY")  # litellm's name, then Perplexity's own
# a Responses answer still being made; and the statuses it ends with
RUNNING = ("queued", "in_progress")
ENDED = ("completed", "incomplete", "failed", "cancelled")
CANCEL_TIMEOUT_S = 10.0
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
GEMINI_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


@dataclass(frozen=True)
class Grounding:
    """How a model that researches is asked. `tools`: the Responses API's tools (its built-in
    `web_search_preview`); `stream`: read the answer as a stream; `background`: a Responses request
    runs in the background and is polled every `poll_s` seconds (the answer is the same)."""

    api: GroundingApi = "chat"
    tools: tuple[dict[str, Any], ...] = ()
    stream: bool = False
    background: bool = False
    poll_s: float = 2.0

    def identity(self) -> dict[str, Any]:
        """What changes the answer (what the response cache keys on): not how it was read."""
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
    search_calls: int | None = Field(default=None, description="Web searches the provider bills for.")
    page_actions: int | None = Field(
        default=None, description="Other web actions (the Responses API's open_page, find_in_page): not billed."
    )


class GroundedAnswer(BaseModel):
    text: str
    citations: list[ProviderCitation] = Field(default_factory=list)
    search_results: list[dict[str, Any]] = Field(default_factory=list)
    usage: ProviderUsage = Field(default_factory=ProviderUsage)


@dataclass
class ProviderReply:
    """One provider answer, read: what the gateway caches, prices and ledgers. Its price, in parts:
    `token_cost` (None: no price known), `search_cost` of its billed searches (None: searches with
    no price known), or `bill`: the provider's own bill of the whole call (Perplexity's cost block)."""

    answer: GroundedAnswer
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    token_cost: float | None = None
    search_cost: float | None = 0.0
    bill: float | None = None
    raw: Any = field(default=None, repr=False)


def billed_cost(reply: ProviderReply, settings: ModelSettings) -> float | None:
    """A grounded call's dollars, each part counted once: the provider's own bill as it is; else its
    tokens at the role's prices (or litellm's) and its billed searches at the role's
    `search_cost_per_call` (or litellm's price per search), which replaces, never adds to, the
    other. None: a part has no known price."""
    if reply.bill is not None:
        return reply.bill
    searches = reply.answer.usage.search_calls or 0
    tokens = reply.token_cost
    if settings.input_cost_per_token is not None and settings.output_cost_per_token is not None:
        tokens = (
            reply.prompt_tokens * settings.input_cost_per_token
            + reply.completion_tokens * settings.output_cost_per_token
        )
    searched = reply.search_cost if searches else 0.0
    if settings.search_cost_per_call is not None:
        searched = searches * settings.search_cost_per_call
    return None if tokens is None or searched is None else tokens + searched


def token_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """litellm's price of a call's tokens (None: it has none for `model`)."""
    import litellm

    try:
        return float(
            sum(litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))
        )
    except Exception:  # noqa: BLE001 - litellm has no price for this model: the cost is unknown
        return None


def searches_cost(model: str, searches: int, tools: Iterable[dict[str, Any]] = ()) -> float | None:
    """`searches` web searches at litellm's price per search of `model` (None: it has none)."""
    if not searches:
        return 0.0
    price = search_price(model, tools)
    return None if price is None else searches * price


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    value = getattr(obj, name, default)
    if value is default and hasattr(obj, "model_extra"):  # a field the SDK's model does not declare
        value = (obj.model_extra or {}).get(name, default)
    return value


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cited_url(url: str) -> str:
    """A provider's cited URL without its tracking parameters (`utm_*`: OpenAI tags each citation
    `?utm_source=openai`): they name who linked the page, not the page."""
    parts = urlsplit(url)
    if "utm_" not in parts.query:
        return url
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not k.lower().startswith("utm_")]
    return urlunsplit(parts._replace(query=urlencode(kept)))


def _numbered(urls: Iterable[tuple[str, str, tuple[int, int] | None]]) -> list[ProviderCitation]:
    """Citations numbered by first use of their URL, each with the spans that cite it."""
    by_url: dict[str, ProviderCitation] = {}
    for url, title, span in urls:
        url = cited_url(url) if url else url
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


def search_price(model: str, tools: Iterable[dict[str, Any]] = ()) -> float | None:
    """litellm's price of one web search of `model` (at the search tool's context size), None if it has none."""
    import litellm

    size = next((t.get("search_context_size") for t in tools if t.get("search_context_size")), None) or "medium"
    try:
        prices = litellm.get_model_info(model).get("search_context_cost_per_query")
    except Exception:  # noqa: BLE001 - litellm knows no such model: no price
        return None
    if isinstance(prices, dict):
        return _float_or_none(prices.get(f"search_context_size_{size}"))
    return _float_or_none(prices)


# --------------------------------------------------------------------------- chat completions


def chat_citations(
    citations: list[Any] | None, search_results: list[Any] | None, annotations: list[Any] | None
) -> list[ProviderCitation]:
    """Perplexity's `citations` (numbered as listed, titled from `search_results`), else its
    `search_results` (numbered as listed: the API's newer form), else the message's `url_citation`
    annotations numbered by first use."""
    results = [r for r in search_results or [] if _get(r, "url")]
    titles = {_get(r, "url"): _get(r, "title") or "" for r in results}
    urls = [c if isinstance(c, str) else _get(c, "url") for c in citations or []]
    if not any(urls):
        urls = [_get(r, "url") for r in results]
    if any(urls):
        return [
            ProviderCitation(url=cited_url(url), title=titles.get(url, ""), number=index)
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
    or OpenAI's details)."""
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


def _search_results(items: list[Any] | None) -> list[dict[str, Any]]:
    out = []
    for item in items or []:
        data = item if isinstance(item, dict) else item.model_dump() if hasattr(item, "model_dump") else None
        if isinstance(data, dict):
            out.append(dict(data))
    return out


def read_chat(response: Any, model: str, usage: Any = None, said: Iterable[str | None] = ()) -> ProviderReply:
    """A litellm chat completion: its tokens and its billed searches priced apart (`usage`: a
    stream's last usage block, which litellm's rebuilt answer may lack; `said`: the finish reasons
    its chunks said, of which a cut is not undone by a later "stop")."""
    choice = response.choices[0]
    message = choice.message
    usage = usage if usage is not None else getattr(response, "usage", None)
    citations = getattr(response, "citations", None)
    search_results = getattr(response, "search_results", None) or []
    read_usage = chat_usage(usage)
    prompt = int(_get(usage, "prompt_tokens", 0) or 0)
    completion = int(_get(usage, "completion_tokens", 0) or 0)
    finish_reason = choice_finish(choice, said)
    # reasoning in a field of its own and no text after it: reasoning that never reached its answer,
    # read by the provider contract as an unclosed <think> block (reasoning_unclosed)
    text = answer_or_reasoning(
        _THINKING.sub("", getattr(message, "content", None) or "", count=1), message, finish_reason
    )
    return ProviderReply(
        answer=GroundedAnswer(
            text=text,
            citations=chat_citations(citations, search_results, getattr(message, "annotations", None)),
            search_results=_search_results(search_results),
            usage=read_usage,
        ),
        prompt_tokens=prompt,
        completion_tokens=completion,
        finish_reason=finish_reason,
        token_cost=token_cost(model, prompt, completion),
        search_cost=searches_cost(model, read_usage.search_calls or 0),
        raw=response,
    )


async def read_chat_stream(stream: AsyncIterator[Any], messages: list[dict[str, Any]], model: str) -> ProviderReply:
    """A streamed litellm chat completion, collected (a search model's annotations ride on its deltas)."""
    import litellm

    chunks: list[Any] = []
    citations: list[Any] | None = None
    search_results: list[Any] | None = None
    annotations: list[Any] = []
    # every finish reason the provider said, in its own words: litellm keeps only the last one a chunk
    # said (`received_finish_reason`, taken out of the chunk that said it), and hands on its own
    # word for it ("stop" for one it does not know), so a "length" before a "stop" would be lost
    said: list[str | None] = []
    async for chunk in stream:
        chunks.append(chunk)
        citations = getattr(chunk, "citations", None) or citations
        search_results = getattr(chunk, "search_results", None) or search_results
        for choice in getattr(chunk, "choices", None) or []:
            annotations += getattr(choice.delta, "annotations", None) or []
            said.append(getattr(choice, "finish_reason", None))
        said.append(getattr(stream, "received_finish_reason", None))
    # what the provider sent: litellm ends every stream with a chunk of its own saying "stop", so the
    # terminal event is the finish reason its stream wrapper received (a stream cut off has none)
    if getattr(stream, "received_finish_reason", "") is None:  # (a stream of another kind: not told)
        raise IncompleteAnswer(
            f"the stream ended after {len(chunks)} chunks without its terminal event (no finish_reason)", retryable=True
        )
    built = litellm.stream_chunk_builder(chunks, messages=messages)
    if built is None:
        raise IncompleteAnswer("the provider's stream ended with no chunk", retryable=True)
    broken = broke_off(said)
    if broken is not None:
        raise broken
    usage = next((c.usage for c in reversed(chunks) if getattr(c, "usage", None) is not None), None)
    reply = read_chat(built, model, usage=usage, said=said)
    reply.answer.citations = chat_citations(citations, search_results, annotations)
    reply.answer.search_results = _search_results(search_results)
    return reply


# --------------------------------------------------------------------------- Perplexity


def is_perplexity(model: str) -> bool:
    return model.startswith("perplexity/")


def _perplexity_reply(
    model: str,
    text: str,
    citations: list[Any] | None,
    search_results: list[Any] | None,
    usage: Any,
    finish_reason: str | None,
    raw: Any,
) -> ProviderReply:
    """One Perplexity answer (whole, or a stream's collected), priced: its own cost block when it
    sends one, else litellm's prices of its tokens, citation tokens, reasoning tokens and searches."""
    read_usage = chat_usage(usage)
    prompt = int(_get(usage, "prompt_tokens", 0) or 0)
    completion = int(_get(usage, "completion_tokens", 0) or 0)
    bill = _float_or_none(_get(_get(usage, "cost"), "total_cost")) if usage is not None else None
    tokens, searched = (None, None) if bill is not None else _perplexity_price(model, prompt, completion, read_usage)
    return ProviderReply(
        answer=GroundedAnswer(
            text=_THINKING.sub("", text, count=1),
            citations=chat_citations(citations, search_results, None),
            search_results=_search_results(search_results),
            usage=read_usage,
        ),
        prompt_tokens=prompt,
        completion_tokens=completion,
        finish_reason=finish_reason,
        token_cost=tokens,
        search_cost=searched,
        bill=bill,
        raw=raw,
    )


def _perplexity_price(
    model: str, prompt: int, completion: int, usage: ProviderUsage
) -> tuple[float | None, float | None]:
    """litellm's price of a Perplexity answer that came without its cost block: its tokens (citation
    and reasoning tokens at their own prices), and its searches."""
    from litellm.llms.perplexity.cost_calculator import cost_per_token
    from litellm.types.utils import CompletionTokensDetailsWrapper, PromptTokensDetailsWrapper, Usage

    def priced(searches: int) -> float:
        counted = Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetailsWrapper(web_search_requests=searches),
            completion_tokens_details=CompletionTokensDetailsWrapper(reasoning_tokens=usage.reasoning_tokens or 0),
        )
        counted.citation_tokens = usage.citation_tokens or 0  # type: ignore[attr-defined]  # Perplexity's field
        return sum(cost_per_token(model=model.split("/", 1)[1], usage=counted))

    try:
        tokens = priced(0)
        return tokens, priced(usage.search_calls or 0) - tokens
    except Exception:  # noqa: BLE001 - litellm has no price for this model: the cost is unknown
        return None, None


def _perplexity_key(settings: ModelSettings) -> str | None:
    return settings.resolved_api_key() or next((os.environ[k] for k in PERPLEXITY_KEYS if os.environ.get(k)), None)


async def perplexity_call(
    settings: ModelSettings, messages: list[dict[str, Any]], grounding: Grounding
) -> ProviderReply:
    """Perplexity's chat completions through the OpenAI SDK (its base URL unless `api_base`
    names another): the answer whole, or its stream collected."""
    from openai import AsyncOpenAI

    name = settings.model.split("/", 1)[1]
    request: dict[str, Any] = {"model": name, "messages": messages, "temperature": settings.temperature}
    if settings.max_tokens is not None:
        request["max_tokens"] = settings.max_tokens
    async with AsyncOpenAI(
        base_url=settings.api_base or PERPLEXITY_BASE_URL,
        api_key=_perplexity_key(settings) or "",
        max_retries=0,
        timeout=settings.timeout_s,
    ) as client:
        if not grounding.stream:
            response = with_a_choice(await client.chat.completions.create(**request, extra_body=dict(settings.extra)))
            choice = response.choices[0]
            return _perplexity_reply(
                settings.model,
                choice.message.content or "",
                _get(response, "citations"),
                _get(response, "search_results"),
                response.usage,
                read_finish([choice.finish_reason]),
                response,
            )
        stream = await client.chat.completions.create(**request, stream=True, extra_body=dict(settings.extra))
        parts: list[str] = []
        citations = search_results = usage = None
        said: list[str | None] = []  # every chunk's finish reason: a cut is not undone by a later "stop"
        async for chunk in stream:
            # citations and search results come again on later chunks: the last ones count
            citations = _get(chunk, "citations") or citations
            search_results = _get(chunk, "search_results") or search_results
            usage = chunk.usage or usage
            for choice in chunk.choices or []:
                parts.append(choice.delta.content or "")
                said.append(choice.finish_reason)
        finish_reason = read_finish(said)
        broken = broke_off(said)
        if broken is not None:
            raise broken
        if finish_reason is None:  # the stream stopped before its terminal chunk: cut off, not finished
            raise IncompleteAnswer(
                f"the stream ended after {len(parts)} deltas without its terminal event (no finish_reason)",
                retryable=True,
            )
        return _perplexity_reply(settings.model, "".join(parts), citations, search_results, usage, finish_reason, None)


# --------------------------------------------------------------------------- the Responses API


def read_responses(response: Any, model: str, tools: Iterable[dict[str, Any]] = ()) -> ProviderReply:
    """An OpenAI SDK `Response` (the Responses API): the output text, its `url_citation`
    annotations, its billed web searches (`web_search_call` items whose action is a search; an item
    without an action is one too), usage and its price (`tools`: the request's, for the search
    price's context size)."""
    texts: list[str] = []
    found: list[tuple[str, str, tuple[int, int] | None]] = []
    searches = actions = 0
    for item in _get(response, "output") or []:
        kind = _get(item, "type")
        if kind == "web_search_call":
            action = _get(_get(item, "action"), "type")
            if action in (None, "search"):
                searches += 1
            else:
                actions += 1
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
    if status not in ("completed", "incomplete"):  # `incomplete`: cut or filtered, read as such below
        raise _not_whole(response)
    return ProviderReply(
        answer=GroundedAnswer(
            text="".join(texts),
            citations=_numbered(found),
            usage=ProviderUsage(
                reasoning_tokens=_int_or_none(_get(details, "reasoning_tokens")) if details is not None else None,
                search_calls=searches,
                page_actions=actions,
            ),
        ),
        prompt_tokens=int(_get(usage, "input_tokens", 0) or 0),
        completion_tokens=int(_get(usage, "output_tokens", 0) or 0),
        finish_reason=_responses_finish(status, _get(_get(response, "incomplete_details"), "reason")),
        token_cost=_responses_token_cost(response, model),
        search_cost=searches_cost(model, searches, tools),
        raw=response,
    )


def _responses_finish(status: str | None, incomplete: str | None) -> str | None:
    """A Responses API status as a chat finish reason: `completed` stop, `incomplete` for
    max_output_tokens length (or for content_filter, content_filter), else the status (which
    `read_responses` never reads: it is no whole answer)."""
    if status == "completed":
        return "stop"
    if status == "incomplete":
        return "content_filter" if incomplete == "content_filter" else "length"
    return status


def _not_whole(response: Any) -> IncompleteAnswer:
    """Why a Responses answer whose status is neither `completed` nor `incomplete` is no answer:
    still running (`queued`, `in_progress`: a response asked for in the foreground and answered so
    — `responses_call` polls only a background one — which asking again will not change: the
    endpoint answers the next request the same way, and each starts a job of its own), ended
    `failed` or `cancelled` (retried), or a status this client does not know as an end
    (`requires_action`, or none at all: the provider answers so again, so not retried)."""
    status = _get(response, "status")
    if status in RUNNING:
        return IncompleteAnswer(
            f"the response {_get(response, 'id')} is still {status}, with no answer yet: it was asked for in "
            "the foreground, so it is not polled (only a background request is: background = true), "
            "and not asked again",
            retryable=False,
        )
    if status in ("failed", "cancelled"):
        return _ended_badly(response)
    seen = "no status" if status is None else f"status {status!r}"
    return IncompleteAnswer(
        f"the response {_get(response, 'id')} has {seen}: only a 'completed' response is a whole answer",
        retryable=False,
    )


def _responses_token_cost(response: Any, model: str) -> float | None:
    """litellm's price of a Responses answer's tokens (its web search items left out: litellm
    would price every one of them, page actions included), None when it has none."""
    import litellm
    from litellm.types.llms.openai import ResponsesAPIResponse

    data = response.model_dump() if hasattr(response, "model_dump") else dict(response)
    data["output"] = [item for item in data.get("output") or [] if _get(item, "type") != "web_search_call"]
    try:
        return float(
            litellm.completion_cost(completion_response=ResponsesAPIResponse.model_validate(data), model=model)
        )
    except Exception:  # noqa: BLE001 - no price for this model (or a response litellm cannot read): unknown
        return None


class ResponsesStreamError(IncompleteAnswer):
    """A Responses API answer that never completed: its stream broke off, or it ended failed or
    cancelled (the provider contract's answer that arrived whole: retried)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


def _ended_badly(response: Any) -> ResponsesStreamError:
    error = _get(response, "error")
    said = _get(error, "message") or error or "no error given"
    return ResponsesStreamError(f"the response {_get(response, 'id')} ended {_get(response, 'status')}: {said}")


async def read_responses_stream(
    stream: AsyncIterator[Any], *, background: bool = False
) -> tuple[Any | None, str | None]:
    """A streamed Responses API answer: the whole response its `response.completed` (or
    `.incomplete`) event carries, else — for a `background` request only, which goes on on the
    server — (None, the id `response.created` named, for the response to be polled). A stream that
    reports a failure, or that ends without its terminal event otherwise (cut off), is an error."""
    last, response_id, events = None, None, 0
    async for event in stream:
        events += 1
        kind = _get(event, "type")
        if kind in ("response.created", "response.queued", "response.in_progress"):
            response_id = _get(_get(event, "response"), "id") or response_id
        if kind in ("response.completed", "response.incomplete"):
            return _get(event, "response"), response_id
        if kind in ("response.failed", "error"):
            error = _get(_get(event, "response"), "error") or _get(event, "message") or event
            raise ResponsesStreamError(f"the provider's stream reported {kind}: {error}")
        last = kind
    if response_id is None or not background:  # only a background response goes on to be polled
        raise ResponsesStreamError(
            "the stream ended without its terminal event"
            + ("" if response_id is None else " (not in the background: not polled)")
            + f" after {events} events, the last {last}"
        )
    return None, response_id


def _cancel_reserve_s(timeout_s: float) -> float:
    """The end of a call's timeout kept for cancelling a background response still running."""
    return min(CANCEL_TIMEOUT_S, timeout_s / 5)


class StillRunning(IncompleteAnswer):
    """A background response (or a Gemini interaction) still `queued` or `in_progress` when the
    call's timeout ran out: cancelled on the server, and not asked again (a new request would
    start, and bill, a new background job that would need as long)."""

    def __init__(self, response_id: str | None, status: str, timeout_s: float) -> None:
        super().__init__(
            f"the background response {response_id} was still {status} when the call's timeout ran out "
            f"(timeout_s = {timeout_s:g} s): cancelled on the server, not asked again (raise timeout_s)",
            retryable=False,
        )
        self.status = status


async def poll_response(
    client: Any, response: Any, poll_s: float, *, timeout_s: float | None = None, started: float | None = None
) -> Any:
    """A background response, retrieved every `poll_s` seconds until it ends. A wait cut short
    cancels the response on the server, so it does not go on running (and billing) unread.
    `timeout_s`: the call's timeout, counted from `started` (the event loop's clock), which the
    polling ends before — keeping time to cancel — raising StillRunning, named by the status the
    response was left in; without it, the caller bounds the wait."""
    response_id = _get(response, "id")
    loop = asyncio.get_running_loop()
    cancel_s, remaining = CANCEL_TIMEOUT_S, None
    if timeout_s is not None:
        reserve = _cancel_reserve_s(timeout_s)
        cancel_s = reserve / 2
        remaining = max(0.0, (loop.time() if started is None else started) + timeout_s - reserve - loop.time())

    async def polled() -> None:
        nonlocal response
        while _get(response, "status") in RUNNING:
            await asyncio.sleep(poll_s)
            response = await client.responses.retrieve(response_id)

    ran_out = False
    try:
        try:
            await asyncio.wait_for(polled(), remaining)
        except TimeoutError:  # the polling's own end (the caller's would cancel this task instead)
            ran_out = remaining is not None
            if not ran_out:
                raise
    except BaseException:
        if _get(response, "status") in RUNNING:
            with contextlib.suppress(Exception):  # the cancel is a courtesy: the wait has failed already
                await asyncio.shield(asyncio.wait_for(client.responses.cancel(response_id), cancel_s))
        raise
    if ran_out:
        with contextlib.suppress(Exception):  # as above: a courtesy, within the time kept for it
            await asyncio.shield(asyncio.wait_for(client.responses.cancel(response_id), cancel_s))
        assert timeout_s is not None
        raise StillRunning(response_id, str(_get(response, "status")), timeout_s)
    return response


async def responses_call(
    settings: ModelSettings, messages: list[dict[str, Any]], grounding: Grounding
) -> ProviderReply:
    """The Responses API through the OpenAI SDK (model `openai/<name>` or `<name>`): a whole
    answer, a stream, or a background response polled to its end (`grounding.background`, or
    `background = true` in the role's `extra`)."""
    from openai import AsyncOpenAI

    provider, _, name = settings.model.rpartition("/")
    if provider not in ("", "openai"):
        raise ValueError(f"the Responses API is OpenAI's: model {settings.model!r} is not openai/<model>")
    # the polling of a background response ends before the call's timeout (the gateway's) does,
    # keeping time to cancel it: a wait that runs out is named by the status it was left in
    started = asyncio.get_running_loop().time()
    instructions, items = responses_input(messages)
    request: dict[str, Any] = {"model": name, "input": items, **settings.extra}
    if grounding.background:
        request["background"] = True
    if instructions:
        request["instructions"] = instructions
    if grounding.tools:
        request["tools"] = list(grounding.tools)
    if settings.max_tokens is not None:
        request["max_output_tokens"] = settings.max_tokens
    tools = list(grounding.tools) + [t for t in settings.extra.get("tools") or [] if isinstance(t, dict)]
    async with AsyncOpenAI(
        base_url=settings.api_base, api_key=settings.resolved_api_key(), max_retries=0, timeout=settings.timeout_s
    ) as client:
        if grounding.stream:
            response, response_id = await read_responses_stream(
                await client.responses.create(**request, stream=True), background=bool(request.get("background"))
            )
            if response is None:  # a background response's stream broke off: it goes on on the server
                assert response_id is not None  # read_responses_stream raises when it has none
                response = await client.responses.retrieve(response_id)
        else:
            response = await client.responses.create(**request)
        if request.get("background") and _get(response, "status") in RUNNING:
            # only a background request is polled: a response asked for in the foreground and read
            # `queued` or `in_progress` may not be kept on the server (read_responses: not whole)
            response = await poll_response(
                client, response, grounding.poll_s, timeout_s=settings.timeout_s, started=started
            )
        return read_responses(response, settings.model, tools)  # a response not `completed` raises there


# --------------------------------------------------------------------------- Gemini's Interactions API


class ProviderHTTPError(RuntimeError):
    """A provider's HTTP error answer (an API called without an SDK): its status and body, read as
    the gateway reads any provider's error (`provider_errors.classify`)."""

    def __init__(self, status_code: int, body: Any, url: str) -> None:
        super().__init__(f"HTTP {status_code} from {url}: {str(body)[:300]}")
        self.status_code = status_code
        self.body = body


def _checked(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.status_code >= 400 or not isinstance(body, dict):
        raise ProviderHTTPError(response.status_code, body, str(response.request.url))
    return body


def _char_offset(text: str, byte_index: int) -> int:
    """A byte offset into `text` (UTF-8), as a character offset."""
    return len(text.encode("utf-8")[: max(byte_index, 0)].decode("utf-8", errors="ignore"))


def read_interaction(interaction: dict[str, Any], model: str) -> ProviderReply:
    """A finished Gemini interaction: the text of its last model output, that text's URL
    citations (spans from bytes to characters; one outside the text keeps its bytes, so the report
    counts it), its searches and usage."""
    steps = [s for s in interaction.get("steps") or [] if isinstance(s, dict)]
    outputs = [s for s in steps if s.get("type") == "model_output"]
    texts: list[str] = []
    found: list[tuple[str, str, tuple[int, int] | None]] = []
    for part in (outputs[-1].get("content") or []) if outputs else []:
        if not isinstance(part, dict) or part.get("type") != "text":
            continue
        text = str(part.get("text") or "")
        offset = sum(len(t) for t in texts)
        size = len(text.encode("utf-8"))
        for annotation in part.get("annotations") or []:
            if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
                continue
            start, end = annotation.get("start_index"), annotation.get("end_index")
            span = None
            if isinstance(start, int) and isinstance(end, int):
                inside = 0 <= start <= end <= size
                span = (offset + _char_offset(text, start), offset + _char_offset(text, end)) if inside else (start, -1)
            found.append((str(annotation.get("url") or ""), str(annotation.get("title") or ""), span))
        texts.append(text)
    searches = 0
    for step in steps:
        if step.get("type") == "google_search_call":
            queries = (step.get("arguments") or {}).get("queries")
            searches += len(queries) if isinstance(queries, list) and queries else 1
    usage = interaction.get("usage") or {}
    thought = _int_or_none(usage.get("total_thought_tokens"))
    prompt = int(usage.get("total_input_tokens") or 0)
    completion = int(usage.get("total_output_tokens") or 0) + (thought or 0)
    status = interaction.get("status")
    return ProviderReply(
        answer=GroundedAnswer(
            text="".join(texts),
            citations=_numbered(found),
            usage=ProviderUsage(reasoning_tokens=thought, search_calls=searches),
        ),
        prompt_tokens=prompt,
        completion_tokens=completion,
        finish_reason="length" if status == "incomplete" else ("stop" if status == "completed" else status),
        token_cost=token_cost(model, prompt, completion),
        search_cost=searches_cost(model, searches),
        raw=interaction,
    )


async def interactions_call(
    settings: ModelSettings, messages: list[dict[str, Any]], grounding: Grounding
) -> ProviderReply:
    """An agent of Gemini's Interactions API (model `gemini/<agent>`), run in the background and
    polled every `grounding.poll_s` seconds until it ends; cancelled on the server when the wait
    (the call's timeout) runs out, and then StillRunning, named by its status, not asked again."""
    import httpx

    provider, _, name = settings.model.partition("/")
    if provider != "gemini" or not name:
        raise ValueError(f"the Interactions API is Gemini's: model {settings.model!r} is not gemini/<agent>")
    instructions, items = responses_input(messages)
    text = "\n\n".join([*([instructions] if instructions else []), *(str(i["content"]) for i in items)])
    key = settings.resolved_api_key() or next((os.environ[k] for k in GEMINI_KEYS if os.environ.get(k)), None)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reserve = _cancel_reserve_s(settings.timeout_s)
    async with httpx.AsyncClient(
        base_url=(settings.api_base or GEMINI_BASE_URL).rstrip("/") + "/",
        headers={"x-goog-api-key": key or ""},
        timeout=settings.timeout_s,
        trust_env=False,
    ) as client:
        interaction = _checked(
            await client.post("interactions", json={"agent": name, "input": text, "background": True, **settings.extra})
        )

        async def polled() -> None:
            nonlocal interaction
            while interaction.get("status") == "in_progress":
                await asyncio.sleep(grounding.poll_s)
                interaction = _checked(await client.get(f"interactions/{interaction.get('id')}"))

        async def cancel() -> None:
            with contextlib.suppress(Exception):  # a courtesy: the wait has failed already
                await asyncio.shield(
                    asyncio.wait_for(client.post(f"interactions/{interaction.get('id')}/cancel"), reserve / 2)
                )

        # the polling ends before the call's timeout, keeping time to cancel: a job still running then
        # is named by its status and not asked again (a new request would start, and bill, a new one)
        remaining = max(0.0, started + settings.timeout_s - reserve - loop.time())
        try:
            await asyncio.wait_for(polled(), remaining)
        except TimeoutError:
            await cancel()
            raise StillRunning(interaction.get("id"), str(interaction.get("status")), settings.timeout_s) from None
        except BaseException:
            if interaction.get("status") == "in_progress":
                await cancel()
            raise
    if interaction.get("status") in ("failed", "cancelled", "requires_action"):
        said = interaction.get("errors") or interaction.get("error") or "no error given"
        raise ResponsesStreamError(f"the interaction {interaction.get('id')} ended {interaction.get('status')}: {said}")
    return read_interaction(interaction, settings.model)


def responses_input(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as the Responses API takes them: the system prompt as `instructions`, the rest as input."""
    system = [str(m.get("content") or "") for m in messages if m.get("role") in ("system", "developer")]
    rest = [
        {"role": m["role"], "content": m.get("content") or ""}
        for m in messages
        if m.get("role") not in ("system", "developer")
    ]
    return ("\n\n".join(system) or None), rest
