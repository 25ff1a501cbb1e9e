"""The web cache: record, replay with the network switched off, misses, and what records hold."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import httpx
import pytest

from atelier.benchmarks.common.errors import DataError
from atelier.tools.cache import WebCache, request_key
from atelier.tools.config import SandboxConfig, WebConfig
from atelier.tools.errors import FetchFailed, NetworkDisabled, ReplayMiss
from atelier.tools.web import build_web

FIXTURE_CORPUS = Path(__file__).parent / "fixtures" / "web" / "corpus"
QUERIES = ("how do herons fish", "sourdough starter")
PAGES = ("https://field-notes.example/birds/heron-fishing", "https://kitchen-lab.example/bread/sourdough-starter")
MISSING_PAGE = "https://not-in-the-corpus.example/page"


def sandbox_config(cache_dir: Path, mode: str) -> WebConfig:
    return WebConfig(mode=mode, cache_dir=cache_dir, sandbox=SandboxConfig(corpus=str(FIXTURE_CORPUS)))


class NoNetwork(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"replay touched the network: {request.url}")


def disable_network(patch: pytest.MonkeyPatch) -> None:
    """Every socket connection and DNS lookup of this process fails from here on."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled by the test")

    patch.setattr(socket.socket, "connect", refuse)
    patch.setattr(socket.socket, "connect_ex", refuse)
    patch.setattr(socket, "getaddrinfo", refuse)
    patch.setattr(socket, "create_connection", refuse)


async def record_session(cache_dir: Path):
    async with build_web(sandbox_config(cache_dir, "record")) as web:
        results = [await web.search(query, 5) for query in QUERIES]
        pages = [await web.fetch(url) for url in PAGES]
        with pytest.raises(FetchFailed, match="HTTP 404"):
            await web.fetch(MISSING_PAGE)
        return results, pages, list(web.log)


async def test_a_recorded_session_replays_identically_with_the_network_disabled(tmp_path):
    results, pages, log = await record_session(tmp_path)
    assert [entry.from_cache for entry in log] == [False] * 5

    with pytest.MonkeyPatch.context() as patch:
        disable_network(patch)
        async with build_web(sandbox_config(tmp_path, "replay"), transport=NoNetwork()) as web:
            assert web.sandbox is None  # replay starts no sandbox
            replayed_results = [await web.search(query, 5) for query in QUERIES]
            replayed_pages = [await web.fetch(url) for url in PAGES]
            with pytest.raises(FetchFailed, match="HTTP 404"):  # the recorded answer, not a miss
                await web.fetch(MISSING_PAGE)
            assert all(entry.from_cache for entry in web.log)

    assert replayed_results == results
    for live, replayed in zip(pages, replayed_pages, strict=True):
        assert replayed.model_dump(exclude={"from_cache"}) == live.model_dump(exclude={"from_cache"})
        assert replayed.from_cache and not live.from_cache


async def test_a_replay_miss_is_an_error_never_a_live_call(tmp_path):
    await record_session(tmp_path)
    async with build_web(sandbox_config(tmp_path, "replay"), transport=NoNetwork()) as web:
        with pytest.raises(ReplayMiss, match="no recorded search .*never searched"):
            await web.search("never searched")
        with pytest.raises(ReplayMiss, match="no recorded fetch"):
            await web.fetch("https://field-notes.example/birds/owl-hearing")
        with pytest.raises(ReplayMiss):  # same query, other result count: another request
            await web.search(QUERIES[0], 7)


async def test_record_mode_answers_repeats_from_the_recording_even_on_another_port(tmp_path):
    first_results, first_pages, _ = await record_session(tmp_path)
    async with build_web(sandbox_config(tmp_path, "record")) as web:  # a new sandbox, a new port
        again = await web.search(QUERIES[0], 5)
        page = await web.fetch(PAGES[0])
        fresh = await web.search("compost heap", 5)
    assert again == first_results[0]
    assert page.from_cache and page.text == first_pages[0].text
    assert [entry.from_cache for entry in web.log] == [True, True, False]
    assert fresh[0].title == "Making garden compost"


async def test_live_mode_stores_nothing(tmp_path):
    async with build_web(sandbox_config(tmp_path, "live")) as web:
        await web.search(QUERIES[0])
        page = await web.fetch(PAGES[0])
    assert not page.from_cache
    assert list(tmp_path.rglob("*.json")) == []


async def test_records_hold_their_request_under_its_content_address(tmp_path):
    await record_session(tmp_path)
    cache = WebCache(tmp_path, "replay")
    records = list(cache.records())
    assert sorted(record.kind for record in records) == ["fetch"] * 3 + ["search"] * 2
    by_query = {record.request.get("query") or record.request["url"]: record for record in records}
    search = by_query[QUERIES[0]]
    assert search.key == request_key(search.request)
    assert search.request == {
        "kind": "search",
        "provider": "searxng",
        "endpoint": f"sandbox:{FIXTURE_CORPUS}:bm25",
        "options": {"language": None, "categories": None, "safesearch": None, "max_pages": 5},
        "query": QUERIES[0],
        "max_results": 5,
    }
    assert (tmp_path / "records" / search.key[:2] / f"{search.key}.json").exists()
    fetch = by_query[PAGES[0]]
    assert fetch.request["origin"] == f"sandbox:{FIXTURE_CORPUS}" and fetch.response["status"] == 200
    body = cache.body(fetch)
    assert b"<footer" in body  # the full response is stored; extraction runs again on replay
    assert (tmp_path / "blobs" / fetch.body_sha256[:2] / fetch.body_sha256).read_bytes() == body
    assert by_query[MISSING_PAGE].response["status"] == 404


async def test_a_corrupted_record_or_body_is_a_data_error_naming_the_file(tmp_path):
    await record_session(tmp_path)
    cache = WebCache(tmp_path, "replay")
    fetch = next(record for record in cache.records() if record.request.get("url") == PAGES[0])
    blob = tmp_path / "blobs" / fetch.body_sha256[:2] / fetch.body_sha256
    blob.write_bytes(blob.read_bytes() + b"tampered")
    with pytest.raises(DataError, match="does not match its sha256") as error:
        cache.body(fetch)
    assert error.value.file == str(blob)
    record_path = tmp_path / "records" / fetch.key[:2] / f"{fetch.key}.json"
    record_path.write_text(json.dumps({"key": fetch.key}))
    with pytest.raises(DataError, match="corrupted web cache record") as error:
        cache.load(fetch.key)
    assert error.value.file == str(record_path)


async def test_replay_mode_builds_a_client_that_cannot_reach_the_network(tmp_path):
    async with build_web(sandbox_config(tmp_path, "replay")) as web:
        with pytest.raises(NetworkDisabled, match="replay mode"):
            await web.http.request("GET", "http://sandbox.invalid/search")


async def test_identical_requests_in_flight_together_share_one_live_call(tmp_path):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from atelier.tools.asgi_server import AsgiServer

    calls = []

    async def search(request):
        calls.append(request.query_params["q"])
        await asyncio.sleep(0.2)  # long enough for the other callers to arrive
        return JSONResponse({"query": "q", "results": [{"url": "https://x.example/", "title": "X", "content": ""}]})

    with AsgiServer(Starlette(routes=[Route("/search", search)])) as server:
        config = WebConfig(
            provider_options={"base_url": server.base_url, "max_pages": 1},
            mode="record",
            cache_dir=tmp_path,
            allow_hosts=[server.host_port],
        )
        async with build_web(config) as web:
            answers = await asyncio.gather(*(web.search("same question") for _ in range(4)), web.search("other"))
    assert sorted(calls) == ["other", "same question"]
    assert all(answer == answers[0] for answer in answers[:4])
    assert len(list(WebCache(tmp_path, "replay").records())) == 2


async def test_answers_read_from_disk_are_kept_in_memory_up_to_a_byte_budget(tmp_path, monkeypatch):
    """A run reads the same pages in many episodes: each record is parsed and its body hashed once,
    and the bodies kept stay within the budget (least recently used dropped first)."""
    await record_session(tmp_path)
    reads: list[str] = []
    original = WebCache._read_record
    monkeypatch.setattr(
        WebCache, "_read_record", staticmethod(lambda path: reads.append(os.path.basename(path)) or original(path))
    )
    cache = WebCache(tmp_path, "replay", memory_bytes=10**6)
    requests = [record.request for record in cache.records() if record.kind == "fetch"]
    reads.clear()

    async def never() -> tuple[dict, bytes]:
        raise AssertionError("replay went live")

    first = [await cache.answer("fetch", request, never) for request in requests]
    again = [await cache.answer("fetch", request, never) for request in requests]
    assert len(reads) == len(requests) == 3  # the second pass read nothing from disk
    assert again == first and all(answer.from_cache for answer in again)

    sizes = sorted(len(answer.body) for answer in first)
    small = WebCache(tmp_path, "replay", memory_bytes=sizes[-1] + sizes[-2] - 1)  # room for no two biggest
    reads.clear()
    for request in requests + requests:
        await small.answer("fetch", request, never)
    assert small._recent.currsize <= small._recent.maxsize
    assert len(reads) > 3  # some had to be read again


async def test_a_page_answered_again_by_the_cache_is_read_once_and_each_caller_gets_its_own(tmp_path, monkeypatch):
    """The cache hands out the very same answer for a request it answered before; the page read
    from it (which depends on nothing else) is made once, each fetch still logged, each caller
    given a copy of its own, each request built and keyed once. An answer that is not the same
    object (live mode) is read again."""
    await record_session(tmp_path)
    from atelier.tools.readers.direct import DirectReader

    reads: list[str] = []
    original = DirectReader.read_page

    async def counted(self, url, response, **kwargs):
        reads.append(url)
        return await original(self, url, response, **kwargs)

    monkeypatch.setattr(DirectReader, "read_page", counted)
    import atelier.tools.web as web_module

    keyed: list[str] = []
    monkeypatch.setattr(
        web_module, "request_key", lambda request: keyed.append(request["kind"]) or request_key(request)
    )
    async with build_web(sandbox_config(tmp_path, "replay")) as web:
        first = [await web.fetch(url) for url in PAGES]
        again = [await web.fetch(url) for url in PAGES]
        results = [await web.search(QUERIES[0], 5) for _ in range(2)]
        assert reads == list(PAGES)  # read once each
        assert again == first and all(a is not b for a, b in zip(again, first))
        assert results[0] == results[1] and results[0][0] is not results[1][0]
        again[0].text = "changed by one caller"
        again[0].metadata["charset"] = "changed"
        results[0][0].raw["title"] = "changed"
        assert (await web.fetch(PAGES[0])).text == first[0].text
        assert (await web.fetch(PAGES[0])).metadata == first[0].metadata != again[0].metadata
        assert (await web.search(QUERIES[0], 5))[0].raw == results[1][0].raw != results[0][0].raw
        assert [entry.kind for entry in web.log] == ["fetch"] * 4 + ["search"] * 2 + ["fetch"] * 2 + ["search"]
        assert keyed == ["fetch", "fetch", "search"]  # each request built and keyed once (each logged above)
    reads.clear()
    async with build_web(sandbox_config(tmp_path, "live")) as web:
        await web.fetch(PAGES[0])
        await web.fetch(PAGES[0])
    assert reads == [PAGES[0]] * 2


def test_a_pages_metadata_handed_out_is_the_callers_own_to_change_at_any_depth():
    from datetime import UTC, datetime

    from atelier.tools.web import _own_copy

    class Odd:  # not plain data: deep-copied
        def __init__(self) -> None:
            self.seen: list[str] = []

    original = {
        "tags": ["a", "b"],
        "nested": {"categories": ["x"]},
        "date": datetime(2024, 1, 1, tzinfo=UTC),
        "odd": Odd(),
    }
    copied = _own_copy(original)
    copied["tags"].append("c")
    copied["nested"]["categories"][0] = "y"
    copied["odd"].seen.append("changed")
    assert original["tags"] == ["a", "b"] and original["nested"] == {"categories": ["x"]} and original["odd"].seen == []
    assert copied["date"] is original["date"]  # immutable leaves are shared
