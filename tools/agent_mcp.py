"""The agent web's MCP server: `web_search` and `fetch_page` tools over a session's `Web`.

Served under `/s/<token>/mcp` (streamable HTTP, stateless, JSON answers) by the agent endpoint;
the token in the path picks the session, so each agent run searches its own run's web. Needs
the `mcp` package (the `agents` extra).
"""

from __future__ import annotations

import logging

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.server import StreamableHTTPASGIApp
from starlette.routing import Route

from atelier.tools.agent_web import SESSION_PREFIX, Source, WebSession, WebSessions
from atelier.tools.errors import WebError

MCP_TOOLS = ("web_search", "fetch_page")


def _format_results(query: str, found: list[tuple[Source, str]]) -> str:
    if not found:
        return f"No results for {query!r}. Try other search terms."
    parts = [f'Search results for "{query}":']
    for rank, (source, excerpt) in enumerate(found, start=1):
        parts.append(f"--- SOURCE {rank}: {source.title} ---\nURL: {source.url}\n\nCONTENT:\n{excerpt}")
    return "\n\n".join(parts)


def mcp_server(sessions: WebSessions):
    """A FastMCP server whose tools search and read the calling session's web. Its routes are
    `mcp_routes`; its session manager must run for as long as the app serves (`lifespan`)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server = FastMCP("atelier-web", stateless_http=True, json_response=True, log_level="WARNING")
    root.handlers[:] = handlers  # FastMCP configures the root logger; the process's set-up stays
    root.setLevel(level)

    def session_of(ctx: Context) -> WebSession:
        request = ctx.request_context.request
        session = sessions.get(request.path_params.get("token") if request is not None else None)
        if session is None:
            raise ValueError("unknown session: this MCP server serves only the sessions it opened")
        return session

    @server.tool()
    async def web_search(queries: list[str], ctx: Context) -> str:
        """Search the web. Give one or more search queries; each result comes with its URL and
        an excerpt of the page's main text."""
        session = session_of(ctx)
        blocks = []
        for query in queries[:5]:
            try:
                found = await session.search(query)
            except WebError as exc:
                session.failed("search", query, exc)
                blocks.append(f"Search for {query!r} failed: {exc}")
                continue
            read: list[tuple[Source, str]] = []
            for source in found:
                try:
                    _, text = await session.read(source)
                    read.append((source, text[: session.page_chars]))
                except WebError as exc:
                    session.failed("fetch", source.url, exc)
                    read.append((source, source.snippet))
            blocks.append(_format_results(query, read))
        return "\n\n".join(blocks) if blocks else "No queries given."

    @server.tool()
    async def fetch_page(url: str, ctx: Context) -> str:
        """Read one web page (a URL from the search results) in full: its main text."""
        session = session_of(ctx)
        source = session.source_for(url)
        if source is None:
            return f"Error: {url} is not among the search results of this session; search first."
        try:
            title, text = await session.read(source)
        except WebError as exc:
            session.failed("fetch", source.url, exc)
            return f"Error: could not fetch {url}: {exc}"
        return f"{title}\nURL: {source.url}\n\n{text[: session.page_chars * 4]}"

    server.streamable_http_app()  # creates the session manager the routes use
    return server


def mcp_routes(server: FastMCP) -> list[Route]:
    return [Route(f"{SESSION_PREFIX}/mcp", endpoint=StreamableHTTPASGIApp(server.session_manager))]
