"""`AgentEndpoint`: the loopback server external agents talk to, one per run and system.

It serves, on 127.0.0.1 and a free port:
- `/v1/...` the OpenAI-compatible API over the run's gateway (`agents.models.openai_api`);
- `/s/<token>/...` the agent web: SearXNG search, pages and MCP tools over the run's `Web`
  (`tools.agent_web`).

Each agent run opens a session (`AgentEndpoint.session`): a bearer token that tags its model
calls with the case, system and the agent's call names, and a web session that records what
it searched and read. The server runs on its own thread; the gateway and web calls it makes
are handed to the episode's event loop, so they share the run's limits and clients.

A session opened `bound` (an isolated job's) is answered only on the connections its own job's
relay opens (`Bindings`): its token, even leaked to another job, is refused (403) on any other
connection, and a job's connection carries no token but its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.openai_api import EndpointSession, Sessions, openai_routes
from atelier.graphs.context import EpisodeContext
from atelier.graphs.resources import on_release
from atelier.tools.agent_web import WebSession, WebSessions, agent_web_routes, proxy_token
from atelier.tools.asgi_server import AsgiServer
from atelier.tools.web import Web


class Bindings:
    """Which session each relayed connection belongs to (by the port it comes from), and which
    sessions may be used only on their own job's connections."""

    def __init__(self) -> None:
        self._by_port: dict[int, str] = {}
        self._bound: set[str] = set()
        self._lock = threading.Lock()

    def require(self, token: str) -> None:
        with self._lock:
            self._bound.add(token)

    def release(self, token: str) -> None:
        with self._lock:
            self._bound.discard(token)

    def connection(self, token: str, port: int) -> Callable[[], None]:
        """The connection from local `port` is the session `token`'s (until the returned call)."""
        with self._lock:
            self._by_port[port] = token

        def unbind() -> None:
            with self._lock:
                if self._by_port.get(port) == token:
                    del self._by_port[port]

        return unbind

    def refusal(self, port: int | None, tokens: set[str]) -> str | None:
        """Why a request from `port` carrying `tokens` is refused (None: it is not)."""
        with self._lock:
            own = self._by_port.get(port) if port is not None else None
            foreign = {t for t in tokens if t in self._bound and t != own}
        if own is not None and tokens - {own}:
            return "a job's connection carries its own session's token only"
        if foreign:
            return "this session is answered only on its own job's connections"
        return None


def request_tokens(scope: Scope) -> set[str]:
    """Every session token a request names: its bearer key, its `/s/<token>/` path, its proxy user."""
    headers = Headers(scope=scope)
    tokens = set()
    kind, _, value = headers.get("authorization", "").partition(" ")
    if kind.lower() == "bearer" and value.strip():
        tokens.add(value.strip())
    path = scope.get("path", "")
    if path.startswith("/s/"):
        tokens.add(path.split("/", 3)[2])
    proxied = proxy_token(headers)
    if proxied:
        tokens.add(proxied)
    return tokens


class BoundSessions:
    """ASGI middleware: a request a `Bindings` refuses gets 403 before any route sees it."""

    def __init__(self, app: ASGIApp, *, bindings: Bindings) -> None:
        self.app = app
        self.bindings = bindings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            reason = self.bindings.refusal(client[1] if client else None, request_tokens(scope))
            if reason is not None:
                await JSONResponse({"error": reason}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class AgentEndpoint:
    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, fallback: EndpointSession | None = None, with_mcp: bool = True
    ) -> None:
        """`fallback`: the session of requests without a known token (`atelier gateway serve`).
        `with_mcp` needs the `mcp` package (the `agents` extra)."""
        self.sessions = Sessions(fallback)
        self.web_sessions = WebSessions()
        self.bindings = Bindings()
        routes = openai_routes(self.sessions) + agent_web_routes(self.web_sessions)
        self.mcp = None
        if with_mcp:
            from atelier.tools.agent_mcp import mcp_routes, mcp_server

            self.mcp = mcp_server(self.web_sessions)
            routes += mcp_routes(self.mcp)
        app = Starlette(routes=routes, lifespan=self._lifespan)
        app.add_middleware(BoundSessions, bindings=self.bindings)
        self.server = AsgiServer(app, host, port, lifespan="on")

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):
        if self.mcp is None:
            yield
            return
        async with self.mcp.session_manager.run():
            yield

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def openai_base(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> AgentEndpoint:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def serve_forever(self) -> None:
        self.server.serve_forever()

    @contextlib.contextmanager
    def session(
        self,
        gateway: Gateway,
        web: Web | None,
        *,
        agent: str,
        tags: dict[str, str],
        roles: dict[str, str],
        max_results: int = 5,
        page_chars: int = 2000,
        keep: Callable[[str], str] | None = None,
        max_searches: int | None = None,
        bound: bool = False,
    ) -> Iterator[tuple[EndpointSession, WebSession | None]]:
        """Open a session for one agent run on the calling event loop; closed on exit. `keep`
        stores each page text the agent reads and returns its sha256 (the run's source store);
        `max_searches`: the web searches the session answers at most; `bound`: answered only on its
        job's relayed connections (`bind`)."""
        model_side = EndpointSession(
            gateway=gateway,
            agent=agent,
            tags=tags,
            roles=roles,
            loop=asyncio.get_running_loop(),
            context=contextvars.copy_context(),
        )
        web_side = None
        if web is not None:
            web_side = WebSession(model_side, web, self.base_url, max_results, page_chars, max_searches=max_searches)
            if keep is not None:
                web_side.keep = keep
        if bound:
            self.bindings.require(model_side.token)
        self.sessions.add(model_side)
        if web_side is not None:
            self.web_sessions.add(web_side)
        try:
            yield model_side, web_side
        finally:
            self.bindings.release(model_side.token)
            self.sessions.remove(model_side)
            if web_side is not None:
                self.web_sessions.remove(web_side)

    def bind(self, token: str) -> Callable[[int], Callable[[], None]]:
        """What a job's relay calls with each connection's local port: that connection is `token`'s."""
        return functools.partial(self.bindings.connection, token)


_lock = threading.Lock()
_endpoints: dict[str, AgentEndpoint] = {}


def _key(context: EpisodeContext) -> str:
    return f"{context.run_id}:{context.system.name}"


def endpoint_for(context: EpisodeContext) -> AgentEndpoint:
    """The endpoint of one run's system (started on first use, stopped when the run releases it)."""
    with _lock:
        key = _key(context)
        if key not in _endpoints:
            _endpoints[key] = AgentEndpoint().start()
        return _endpoints[key]


@on_release
async def release_endpoint(context: EpisodeContext) -> None:
    with _lock:
        endpoint = _endpoints.pop(_key(context), None)
    if endpoint is not None:
        await asyncio.to_thread(endpoint.stop)
