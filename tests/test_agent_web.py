"""The run's web as external agents reach it (SearXNG search, pages, MCP tools), and the offline
guard of an agent's process."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import httpx
import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.graphs.external.agents import CHILD
from atelier.graphs.external.endpoint import AgentEndpoint
from atelier.tools.config import WebConfig
from atelier.tools.web import build_web


@pytest.fixture
async def agent_web(tmp_path):
    endpoint = AgentEndpoint().start()
    web = build_web(WebConfig(cache_dir=tmp_path / "web"))
    with endpoint.session(
        Gateway(ledger=Ledger(None)), web, agent="a", tags={"case": "c"}, roles={}, max_results=3, page_chars=300
    ) as (_, session):
        yield endpoint, web, session
    await web.aclose()
    endpoint.stop()


async def test_searxng_search_and_pages_go_through_the_run_web(agent_web):
    endpoint, web, session = agent_web
    async with httpx.AsyncClient(timeout=30) as client:
        answer = (
            await client.get(f"{session.root}/search", params={"q": "laptop battery life", "format": "json"})
        ).json()
        results = answer["results"]
        # page addresses are the same on any port and for any session: prompts quoting them replay
        assert 1 <= len(results) <= 3 and all(r["url"].startswith("http://pages.atelier.invalid/") for r in results)
        citable = results[0]["citable_url"]
        assert not citable.startswith(endpoint.base_url)
    async with httpx.AsyncClient(timeout=30, proxy=session.proxy) as scraper:  # the agent's scraper
        page = await scraper.get(results[0]["url"])
        stranger = await scraper.get(results[0]["url"], headers={"Proxy-Authorization": "Basic bm9ib2R5Ong="})
    assert page.status_code == 200 and "<article>" in page.text and stranger.status_code == 404
    async with httpx.AsyncClient(timeout=30) as client:
        missing = await client.get(f"{session.root}/page/nope")
        unknown = await client.get(f"{endpoint.base_url}/s/not-a-session/search", params={"q": "x"})
    assert missing.status_code == 404 and unknown.status_code == 404
    assert [(e.kind, e.request.get("query") or e.request.get("url")) for e in web.log] == [
        ("search", "laptop battery life"),
        ("fetch", citable),
    ]
    source = session.source_for(results[0]["url"])
    assert source is session.source_for(citable) and source.url == citable and source.sha256
    fetched = await web.fetch(citable)
    assert source.sha256 == hashlib.sha256(fetched.text.encode()).hexdigest()
    known, unverified = session.cited([citable, results[0]["url"], "https://example.org/made-up"])
    assert known == [source] and unverified == ["https://example.org/made-up"]


async def test_mcp_tools_search_and_read_through_the_run_web(agent_web):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    endpoint, web, session = agent_web
    async with streamablehttp_client(f"{session.root}/mcp") as (read, write, _):
        async with ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("web_search", {"queries": ["refurbished laptop warranty"]})
            text = found.content[0].text
            first_url = next(line[5:] for line in text.splitlines() if line.startswith("URL: "))
            page = await client.call_tool("fetch_page", {"url": first_url})
            refused = await client.call_tool("fetch_page", {"url": "https://example.org/not-searched"})
    assert tools == {"web_search", "fetch_page"}
    assert 'Search results for "refurbished laptop warranty"' in text and "CONTENT:" in text
    assert f"URL: {first_url}" in page.content[0].text
    assert "not among the search results" in refused.content[0].text
    kinds = [e.kind for e in web.log]
    assert kinds[0] == "search" and kinds.count("fetch") == len([s for s in session.sources.values() if s.sha256]) + 1
    assert session.searches == 1 and session.fetches == kinds.count("fetch")


GUARDED = textwrap.dedent("""
    import json, socket, sys
    sys.path.insert(0, sys.argv[1])
    import guard
    refused = []
    guard.install(refused)
    outcomes = {}
    for host, connect in (("10.255.255.1", lambda: socket.socket().connect(("10.255.255.1", 80))),
                          ("example.com", lambda: socket.create_connection(("example.com", 80), timeout=0.5))):
        try:
            connect()
            outcomes[host] = "connected"
        except PermissionError:
            outcomes[host] = "refused"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0)); server.listen(1)
        socket.create_connection(server.getsockname(), timeout=2).close()
        outcomes["loopback"] = "connected"
    print(json.dumps({"outcomes": outcomes, "refused": refused}))
""")


def test_the_offline_guard_refuses_everything_but_loopback():
    import json

    done = subprocess.run([sys.executable, "-c", GUARDED, str(CHILD)], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert report["outcomes"] == {"10.255.255.1": "refused", "example.com": "refused", "loopback": "connected"}
    assert report["refused"] == ["connect 10.255.255.1:80", "getaddrinfo example.com:80"]


async def test_serper_and_jina_answer_as_their_apis_within_the_sessions_web(agent_web):
    """Serper's search and Jina's reader over the session's web (what agents built on them call);
    the reader serves only what the session's searches found; the session's cap on searches holds."""
    endpoint, web, session = agent_web
    async with httpx.AsyncClient(timeout=30) as client:
        found = await client.post(f"{session.root}/serper/search", json={"q": "laptop battery life", "num": 2})
        assert found.status_code == 200
        organic = found.json()["organic"]
        assert len(organic) == 2 and [o["position"] for o in organic] == [1, 2]
        link = organic[0]["link"]
        assert link.startswith("https://") and not link.startswith(endpoint.base_url)
        page = await client.get(f"{session.root}/jina/{link}")
        assert page.status_code == 200 and page.text.startswith("Title: ") and f"URL Source: {link}" in page.text
        as_json = await client.get(f"{session.root}/jina/{link}", headers={"Accept": "application/json"})
        assert as_json.json()["data"]["url"] == link and as_json.json()["data"]["content"]
        # a page no search of this session found is not served: the reader is no way out to the web
        unknown = await client.get(f"{session.root}/jina/https://elsewhere.example/secret")
        assert unknown.status_code == 404 and "not among this session's search results" in unknown.text
        empty = await client.post(f"{session.root}/serper/search", json={"q": " "})
        assert empty.status_code == 400
        session.max_searches = session.searches  # spent: the next is refused, counted, not a failure
        refused = await client.post(f"{session.root}/serper/search", json={"q": "more"})
        assert refused.status_code == 429 and session.searches_refused == 1
    assert session.fetches == 2 and not any(d.kind == "search_failed" for d in session.degraded)
