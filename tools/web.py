"""`Web`: one run's search, fetch and web cache wired together. `build_web(config)` makes it.

    async with build_web(WebConfig(sandbox=SandboxConfig(corpus="wiki"))) as web:
        results = await web.search("Alan Turing")
        page = await web.fetch(results[0].url)

With the default `searxng` provider and no base_url, the sandbox web is started in-process on
loopback (and allow-listed); results carry the documents' citable URLs and fetches of those URLs
are served by the sandbox. In replay mode nothing is started and no request can leave the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import json
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import httpx
from cachetools import LRUCache
from pydantic import BaseModel, Field

from atelier.benchmarks.common.collect import collecting
from atelier.benchmarks.data_files import cache_dir
from atelier.tools.asgi_server import AsgiServer
from atelier.tools.cache import CachedAnswer, RequestKind, WebCache, request_key
from atelier.tools.config import WebConfig
from atelier.tools.errors import FetchFailed, SearchFailed, WebError
from atelier.tools.http import GuardedHttp, HttpResponse, OfflineTransport
from atelier.tools.page import Page
from atelier.tools.readers.base import PageReader
from atelier.tools.readers.registry import reader_class, reader_config
from atelier.tools.sandbox.urls import mirror_url
from atelier.tools.search.base import SearchProvider, SearchResult
from atelier.tools.search.registry import provider_class, provider_config
from atelier.tools.service import require_keys
from atelier.tools.url_guard import AllowList, UrlGuard
from atelier.tools.urls import canonical_url

# The sandbox web's address in whatever a run records or says (its cache, errors, reports): the
# same on every run, whichever loopback port the sandbox was served on. It is also where a replay
# points, which starts no sandbox: `.invalid` never resolves, and the replay transport refuses
# every request anyway.
SANDBOX_ORIGIN = "http://sandbox.invalid"


class WebLogEntry(BaseModel):
    """One request of this session, so a run folder can list what it searched and fetched."""

    kind: RequestKind
    key: str
    request: dict[str, Any]
    from_cache: bool
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))


_captured: contextvars.ContextVar[list[WebLogEntry] | None] = contextvars.ContextVar(
    "atelier_web_capture", default=None
)


@contextlib.contextmanager
def capture_web_log() -> Iterator[list[WebLogEntry]]:
    """Collect the web log entries of every request made inside this block (tasks it starts
    included): a remote worker ships one episode's entries back to the driver this way."""
    with collecting(_captured) as entries:
        yield entries


def check_web_config(config: WebConfig) -> None:
    """Fail before a run starts: unknown names, bad options, or a provider without its API key."""
    provider_options = provider_config(config.provider, config.provider_options)
    reader_options = reader_config(config.reader, config.reader_options)
    if config.mode != "replay":  # a replay never calls the service, so it needs no key
        require_keys(config.provider, provider_options)
        require_keys(config.reader, reader_options)


def web_description(config: WebConfig) -> dict[str, Any]:
    """Which web a run searched, as its summary and report say it: the provider, the sandbox corpus
    and its document count (when it is the sandbox), and whether it was live, recorded or replayed."""
    described: dict[str, Any] = {
        "provider": config.provider,
        "mode": config.mode,
        "corpus": None,
        "documents": None,
        "endpoint": None,
    }
    if config.uses_sandbox:
        from atelier.tools.sandbox.corpus import load_corpus

        spec = config.sandbox_settings.corpus
        described.update(corpus=spec, documents=len(load_corpus(spec)), endpoint=config.sandbox_settings.url)
    else:
        described["endpoint"] = config.provider_options.get("base_url")
    if config.mode == "replay":
        described["replayed_from"] = str(config.cache_dir) if config.cache_dir else None
    return described


class Web:
    def __init__(
        self,
        *,
        provider: SearchProvider,
        reader: PageReader,
        cache: WebCache,
        http: GuardedHttp,
        max_results: int = 10,
        sandbox: AsgiServer | None = None,
        sandbox_url: str | None = None,
    ) -> None:
        """Prefer `build_web`. `sandbox` is a started sandbox server this Web owns and stops on close;
        `sandbox_url` the address the sandbox web is reached at, which nothing recorded or said names
        (`SANDBOX_ORIGIN` stands for it)."""
        self.provider = provider
        self.reader = reader
        self.cache = cache
        self.http = http
        self.max_results = max_results
        self.sandbox = sandbox
        self.sandbox_url = sandbox_url.rstrip("/") if sandbox_url and sandbox_url != SANDBOX_ORIGIN else None
        self.log: list[WebLogEntry] = []
        # every URL this web was asked to fetch (as asked and canonical) or a search of it returned:
        # what a response may cite without a stored text (graphs/contract.py, 'citations only to sources read')
        self._seen_urls: set[str] = set()
        # the page an answer of the cache gave, by the request's key: the cache hands out the very
        # same answer object each time it answers a request again (a run reads the same pages in
        # many episodes), and a page depends on nothing but its answer (`PageReader.read_page`), so
        # it is not validated and read again
        self._pages: LRUCache[str, tuple[CachedAnswer, Page]] = LRUCache(maxsize=512)
        # each request asked, with its cache key, by what the caller gave (a query and count, a URL as
        # written): the provider's and reader's identities do not change while the web is open
        self._requests: LRUCache[tuple[str, str, int], tuple[dict[str, Any], str]] = LRUCache(maxsize=1024)

    def _request(
        self, kind: RequestKind, asked: str, count: int, make: Callable[[], dict[str, Any]]
    ) -> tuple[dict[str, Any], str]:
        """The request `make()` builds for (`kind`, `asked`, `count`), and its cache key, built once."""
        known = self._requests.get((kind, asked, count))
        if known is None:
            request = make()
            known = self._requests[(kind, asked, count)] = (request, request_key(request))
        return known

    def _page_of(self, answer: CachedAnswer) -> Page | None:
        """The page read from `answer` before, if it is the very same answer (else None)."""
        known = self._pages.get(answer.record.key)
        return known[1] if known is not None and known[0] is answer else None

    def _stable(self, text: str) -> str:
        """`text` with the sandbox's address (a loopback port that changes run to run) as `SANDBOX_ORIGIN`."""
        return text.replace(self.sandbox_url, SANDBOX_ORIGIN) if self.sandbox_url else text

    @contextlib.asynccontextmanager
    async def _said_stably(self) -> AsyncIterator[None]:
        """A web error raised inside, its message naming the sandbox by its stable address."""
        try:
            yield
        except WebError as exc:
            stable = self._stable(str(exc))
            if stable == str(exc):
                raise
            raise type(exc)(stable) from None

    def saw(self, url: str) -> bool:
        """Whether this web was asked to fetch `url` or returned it as a search result."""
        if url in self._seen_urls:
            return True
        try:
            return canonical_url(url) in self._seen_urls
        except httpx.InvalidURL:
            return False

    def _note(self, answer: CachedAnswer) -> None:
        record = answer.record
        if record.kind == "search":
            self._seen_urls.update(str(r.get("url")) for r in record.response.get("results", ()) if isinstance(r, dict))
        entry = WebLogEntry(kind=record.kind, key=record.key, request=record.request, from_cache=answer.from_cache)
        self.log.append(entry)
        captured = _captured.get()
        if captured is not None:
            captured.append(entry)

    async def search(self, query: str, max_results: int | None = None) -> list[SearchResult]:
        query = query.strip()
        if not query:
            raise SearchFailed("empty search query")
        count = max_results or self.max_results
        request, key = self._request(
            "search",
            query,
            count,
            lambda: {"kind": "search", **self.provider.identity(), "query": query, "max_results": count},
        )

        async def live() -> tuple[dict[str, Any], None]:
            results = await self.provider.search(query, count)
            recorded = {"results": [result.model_dump(mode="json") for result in results]}
            return (json.loads(self._stable(json.dumps(recorded))) if self.sandbox_url else recorded), None

        async with self._said_stably():
            answer = await self.cache.answer("search", request, live, key=key)
        self._note(answer)
        # made afresh each time: each result's `raw` is a dict a caller may change, and copying it
        # costs about what validating the few results does
        return [SearchResult.model_validate(item) for item in answer.record.response["results"]]

    async def fetch(self, url: str) -> Page:
        # asked for, whatever comes of it: a page that could not be read stays citable, with the
        # reason recorded where it was asked (`fetch_failed`)
        self._seen_urls.add(url)

        def make() -> dict[str, Any]:
            try:
                return {"kind": "fetch", **self.reader.identity(), "url": canonical_url(url)}
            except httpx.InvalidURL as exc:
                raise FetchFailed(f"invalid URL {url!r}: {exc}") from None

        request, key = self._request("fetch", url, 0, make)
        url = request["url"]
        self._seen_urls.add(url)

        async def live() -> tuple[dict[str, Any], bytes]:
            response = await self.reader.download(url)
            recorded = response.model_dump(mode="json")
            return (json.loads(self._stable(json.dumps(recorded))) if self.sandbox_url else recorded), response.body

        async with self._said_stably():
            answer = await self.cache.answer("fetch", request, live, key=key)
            self._note(answer)
            page = self._page_of(answer)
            if page is None:
                response = HttpResponse.model_validate(answer.record.response).model_copy(update={"body": answer.body})
                page = await self.reader.read_page(
                    url, response, fetched_at=answer.record.recorded_at, from_cache=answer.from_cache
                )
                self._pages[answer.record.key] = (answer, page)
            # a caller's change stays its own: the text and other fields are immutable, the metadata is copied
            return page.model_copy(update={"metadata": _own_copy(page.metadata)})

    async def aclose(self) -> None:
        await self.http.aclose()
        if self.sandbox is not None:
            await asyncio.to_thread(self.sandbox.stop)
            self.sandbox = None

    async def __aenter__(self) -> Web:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


_IMMUTABLE = (str, int, float, bool, type(None), bytes, datetime)


def _own_copy(value: Any) -> Any:
    """A copy of `value` a caller may change without changing the original: its dicts and lists
    copied, its immutable leaves shared. A page's metadata is strings and lists of them (every
    fetch hands one out: `copy.deepcopy` cost about 30 µs of a cached fetch's 70); any other
    value is deep-copied."""
    if isinstance(value, dict):
        return {k: _own_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_own_copy(v) for v in value]
    if isinstance(value, _IMMUTABLE):
        return value
    return copy.deepcopy(value)


def build_web(config: WebConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> Web:
    """The run's web. `transport` replaces the network (tests); replay mode uses one that refuses all."""
    check_web_config(config)
    if config.mode == "replay" and transport is None:
        transport = OfflineTransport()
    allow = AllowList(config.allow_hosts)
    http = GuardedHttp(UrlGuard(allow), config.caps, transport=transport)
    provider_cls, reader_cls = provider_class(config.provider), reader_class(config.reader)
    provider_options = provider_config(config.provider, config.provider_options)
    reader_options = reader_config(config.reader, config.reader_options)
    cache = WebCache(config.cache_dir or cache_dir() / "web", config.mode, copy_to=config.copy_dir)
    if not config.uses_sandbox:
        return Web(
            provider=provider_cls(provider_options, http),
            reader=reader_cls(reader_options, http),
            cache=cache,
            http=http,
            max_results=config.max_results,
        )

    settings = config.sandbox_settings
    sandbox = None
    if config.mode == "replay":
        base_url = settings.url or SANDBOX_ORIGIN
    elif settings.url:
        base_url = settings.url
    else:
        from atelier.tools.sandbox.server import SandboxWeb

        sandbox = SandboxWeb.from_config(settings).start()
        base_url = sandbox.base_url
    allow.add_origin(base_url)
    return Web(
        provider=provider_cls(
            provider_options, http, endpoint=base_url, endpoint_label=f"{settings.origin()}:{settings.ranker}"
        ),
        reader=reader_cls(reader_options, http, route=partial(mirror_url, base_url), origin=settings.origin()),
        cache=cache,
        http=http,
        max_results=config.max_results,
        sandbox=sandbox,
        sandbox_url=base_url,
    )
