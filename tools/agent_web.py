"""The run's web as external agents reach it: SearXNG search, pages, and MCP tools, over `Web`.

An external agent never touches the network itself. Under `/s/<token>/` (its session):

- `GET search?q=...&format=json` answers in SearXNG's JSON format (gpt-researcher's `searx`
  retriever). Each result's `url` is `http://pages.atelier.invalid/<source id>`, a page the
  agent's own scraper can only reach through this server acting as its HTTP proxy (the session's
  token as proxy user): the address stays the same run to run, so prompts that quote it replay
  from the cache. `citable_url` is the address to cite.
- `GET page/<source id>` (or that proxied address) fetches the result through the run's `Web`
  and serves its main text as a small HTML page.
- `mcp` is an MCP server (streamable HTTP) with `web_search` and `fetch_page` tools
  (open_deep_research's MCP hook); see `tools.agent_mcp`.
- `POST serper/search` answers as Serper's API does (`{"q", "num"}` -> `{"organic": [{"title",
  "link", "snippet", "position"}]}`) and `GET jina/<url>` as Jina's reader does (the page's text
  under `Title:` and `URL Source:`, or with `Accept: application/json` `{"data": {"title", "url",
  "content"}}`): agents built on Serper and Jina (MiroFlow, OAgents, as PDR-Bench ran them) point
  `SERPER_BASE_URL` and `JINA_BASE_URL` here. The reader serves only pages the session's searches
  found.

Every search and fetch goes through `Web` (its cache, caps, URL guard) and so lands in the run's
`web_log.jsonl`. The session remembers every source it showed the agent, with the sha256 of the
page text it read (kept by the session's `keep`, e.g. the run's source store), so the sources an
agent cites map back to exactly what it read.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Host, Route, Router

from atelier.agents.citations import SourceRef
from atelier.agents.models.openai_api import EndpointSession, TokenRegistry
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.tools.errors import ReplayMiss, SearchBudgetSpent, WebError
from atelier.tools.urls import canonical_url, web_source_id
from atelier.tools.web import Web

SESSION_PREFIX = "/s/{token}"
PAGES_HOST = "pages.atelier.invalid"  # `.invalid` never resolves: only the proxy serves it


class Source(BaseModel):
    """A page shown to the agent: its id (`web_source_id` of the URL), the URL to cite, and the
    text it read."""

    id: str
    url: str
    title: str = ""
    snippet: str = ""
    sha256: str | None = None  # of the page text the agent was served; None until fetched
    chars: int = 0

    def ref(self) -> SourceRef | None:
        """The source as a read text (None while only its search snippet was shown)."""
        if self.sha256 is None:
            return None
        return SourceRef(id=self.id, url=self.url, title=self.title, sha256=self.sha256, chars=self.chars)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class WebSession:
    """What one agent session may reach of the run's web, and what it has seen of it."""

    endpoint: EndpointSession
    web: Web
    base_url: str
    max_results: int = 5
    page_chars: int = 2000
    keep: Callable[[str], str] = _sha256  # stores a page text read, returns its sha256
    sources: dict[str, Source] = field(default_factory=dict)
    degraded: list[Degradation] = field(default_factory=list)  # searches and pages that failed
    replay_misses: list[str] = field(default_factory=list)  # requests a replayed web never recorded: fail the episode
    searches: int = 0
    fetches: int = 0
    max_searches: int | None = None  # searches answered at most; past it each is refused (and counted)
    searches_refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def token(self) -> str:
        return self.endpoint.token

    def failed(self, kind: str, what: str, error: WebError) -> None:
        """Record a search or page the agent asked for and did not get (the agent is told, and goes on)."""
        if isinstance(error, ReplayMiss):
            self.replay_misses.append(str(error))
        elif isinstance(error, SearchBudgetSpent):
            pass  # the session's budget at work, counted in `searches_refused`: nothing failed
        else:
            self.degraded.append(
                degradation(
                    "search_failed" if kind == "search" else "fetch_failed",
                    "run_agent",
                    f"{what!r}: {error}" if kind == "search" else f"{what}: {error}",
                )
            )

    @property
    def root(self) -> str:
        return f"{self.base_url}/s/{self.token}"

    @property
    def proxy(self) -> str:
        """The HTTP proxy the agent's scraper uses to reach `page_url`s (the token as its user)."""
        return self.base_url.replace("http://", f"http://{self.token}:x@", 1)

    def page_url(self, source: Source) -> str:
        return f"http://{PAGES_HOST}/{source.id}"

    def _remember(self, url: str, title: str, snippet: str) -> Source:
        url = canonical_url(url)
        source_id = web_source_id(url)
        with self._lock:
            if source_id not in self.sources:
                self.sources[source_id] = Source(id=source_id, url=url, title=title, snippet=snippet)
            return self.sources[source_id]

    def source_for(self, url: str) -> Source | None:
        """The source behind a URL the agent cites: a citable URL or one of this server's pages."""
        for prefix in (f"http://{PAGES_HOST}/", f"{self.root}/page/"):
            if url.startswith(prefix):
                return self.sources.get(url[len(prefix) :].split("?", 1)[0].split("#", 1)[0].rstrip("/"))
        try:
            wanted = canonical_url(url)
        except Exception:  # noqa: BLE001 - a malformed URL in a report is simply not a known source
            return None
        return next((s for s in self.sources.values() if s.url == wanted), None)

    async def search(self, query: str) -> list[Source]:
        with self._lock:
            if self.max_searches is not None and self.searches >= self.max_searches:
                self.searches_refused += 1
                raise SearchBudgetSpent(
                    f"this session's {self.max_searches} web searches are spent: write from what was found"
                )
            self.searches += 1
        results = await self.endpoint.run(lambda: self.web.search(query, self.max_results))
        return [self._remember(r.url, r.title, r.snippet) for r in results]

    async def read(self, source: Source) -> tuple[str, str]:
        """(title, text) of a source's page, fetched through the run's web."""
        self.fetches += 1
        page = await self.endpoint.run(lambda: self.web.fetch(source.url))
        sha256 = self.keep(page.text)
        with self._lock:
            source.sha256 = sha256
            source.chars = len(page.text)
            source.title = source.title or page.title
        return page.title or source.title, page.text

    def cited(self, urls: list[str]) -> tuple[list[Source], list[str]]:
        """The known sources among `urls` (in order, once each), and the URLs that are not."""
        known: list[Source] = []
        unknown: list[str] = []
        for url in urls:
            source = self.source_for(url)
            if source is None:
                if url not in unknown:
                    unknown.append(url)
            elif source not in known:
                known.append(source)
        return known, unknown


class WebSessions(TokenRegistry[WebSession]):
    """Web sessions by token (no fallback: only the sessions an episode opened)."""


def _page_html(title: str, text: str, url: str) -> str:
    paragraphs = "\n".join(f"<p>{html.escape(p.strip())}</p>" for p in text.split("\n") if p.strip())
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<link rel="canonical" href="{html.escape(url)}"></head>'
        f"<body><article><h1>{html.escape(title)}</h1>\n{paragraphs}</article></body></html>"
    )


def proxy_token(headers: Mapping[str, str]) -> str | None:
    """The session token a proxied request carries as its proxy user (`Proxy-Authorization`)."""
    kind, _, value = headers.get("proxy-authorization", "").partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        return base64.b64decode(value).decode().split(":", 1)[0]
    except (ValueError, UnicodeDecodeError):
        return None


def agent_web_routes(sessions: WebSessions) -> list[BaseRoute]:
    """SearXNG search and pages under `/s/{token}/`; pages also on the proxied `PAGES_HOST`."""

    def unknown() -> JSONResponse:
        return JSONResponse({"error": "unknown session"}, status_code=404)

    async def search(request: Request) -> Response:
        session = sessions.get(request.path_params["token"])
        if session is None:
            return unknown()
        query = request.query_params.get("q", "").strip()
        if not query:
            return JSONResponse({"error": "q is required"}, status_code=400)
        try:
            found = await session.search(query)
        except WebError as exc:
            session.failed("search", query, exc)
            return JSONResponse({"error": str(exc)}, status_code=429 if isinstance(exc, SearchBudgetSpent) else 502)
        results = [
            {
                "url": session.page_url(s),
                "citable_url": s.url,
                "title": s.title,
                "content": s.snippet,
                "engine": "atelier",
                "engines": ["atelier"],
                "positions": [rank],
                "category": "general",
                "parsed_url": list(urlparse(s.url)),
            }
            for rank, s in enumerate(found, start=1)
        ]
        return JSONResponse(
            {
                "query": query,
                "number_of_results": len(results),
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )

    async def page(request: Request) -> Response:
        session = sessions.get(request.path_params.get("token") or proxy_token(request.headers))
        source = session.sources.get(request.path_params["source_id"]) if session else None
        if session is None or source is None:
            return HTMLResponse("<html><body><p>Not a page of this session.</p></body></html>", status_code=404)
        try:
            title, text = await session.read(source)
        except WebError as exc:
            session.failed("fetch", source.url, exc)
            return HTMLResponse(f"<html><body><p>{html.escape(str(exc))}</p></body></html>", status_code=502)
        return HTMLResponse(_page_html(title, text, source.url))

    async def serper(request: Request) -> Response:
        session = sessions.get(request.path_params["token"])
        if session is None:
            return unknown()
        try:
            body = await request.json()
        except ValueError:
            body = None
        query = str(body.get("q") or "").strip() if isinstance(body, dict) else ""
        if not query:
            return JSONResponse({"message": "q is required", "statusCode": 400}, status_code=400)
        try:
            found = await session.search(query)
        except WebError as exc:
            session.failed("search", query, exc)
            status = 429 if isinstance(exc, SearchBudgetSpent) else 502
            return JSONResponse({"message": str(exc), "statusCode": status}, status_code=status)
        wanted = body.get("num")
        if isinstance(wanted, int) and wanted > 0:
            found = found[:wanted]
        organic = [
            {"title": s.title, "link": s.url, "snippet": s.snippet, "position": rank}
            for rank, s in enumerate(found, start=1)
        ]
        return JSONResponse(
            {"searchParameters": {"q": query, "type": "search", "engine": "atelier"}, "organic": organic}
        )

    async def jina(request: Request) -> Response:
        session = sessions.get(request.path_params["token"])
        if session is None:
            return unknown()
        url = request.path_params["url"]
        url = re.sub(r"^(https?):/(?!/)", r"\1://", url)  # a client that collapsed the URL's '//'
        if request.url.query:
            url += f"?{request.url.query}"
        source = session.source_for(url)
        if source is None:
            return JSONResponse({"code": 404, "message": f"{url} is not among this session's search results"}, 404)
        try:
            title, text = await session.read(source)
        except WebError as exc:
            session.failed("fetch", source.url, exc)
            return JSONResponse({"code": 502, "message": str(exc)}, status_code=502)
        if "application/json" in request.headers.get("accept", ""):
            data = {"title": title, "url": source.url, "content": text, "description": source.snippet}
            return JSONResponse({"code": 200, "status": 20000, "data": data})
        return Response(
            f"Title: {title}\n\nURL Source: {source.url}\n\nMarkdown Content:\n{text}", media_type="text/plain"
        )

    return [
        Host(PAGES_HOST, app=Router([Route("/{source_id}", page, methods=["GET"])])),
        Route(f"{SESSION_PREFIX}/search", search, methods=["GET"]),
        Route(f"{SESSION_PREFIX}/page/{{source_id}}", page, methods=["GET"]),
        Route(f"{SESSION_PREFIX}/serper/search", serper, methods=["POST"]),
        Route(f"{SESSION_PREFIX}/jina/{{url:path}}", jina, methods=["GET"]),
    ]
