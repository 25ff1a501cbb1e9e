"""One URL is fetched and noted once per episode, whichever researcher asked for it: a round's
parallel researchers share what they read (graphs/deep_research/reads.py)."""

from __future__ import annotations

import asyncio
import collections

import pytest

from atelier.agents.citations import SourceRef
from atelier.graphs.deep_research.graph import build_deep_research_graph
from atelier.graphs.deep_research.reads import EpisodeReads
from atelier.graphs.deep_research.state import Note
from atelier.graphs.resources import release, resources_for
from atelier.tools.web import capture_web_log
from tests.test_pipelines import context


async def _episode(tmp_path, case: str, **options):
    ctx = context(tmp_path, "deep_research", max_researchers=3, **options)
    try:
        with capture_web_log() as log:
            out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": case}, context=ctx)
        notes_calls = [e for e in resources_for(ctx).gateway.ledger.entries if e.node == "take_notes"]
    finally:
        await release(ctx)
    return out["response"], [e.request["url"] for e in log if e.kind == "fetch"], notes_calls


@pytest.mark.parametrize("case", ["q01", "q05", "q14"])
async def test_no_url_is_fetched_twice_in_an_episode(tmp_path, case):
    response, fetched, _ = await _episode(tmp_path, case)
    twice = [url for url, n in collections.Counter(fetched).items() if n > 1]
    assert not twice
    assert response.meta["fetches"] == len(fetched)


async def test_a_url_claimed_once_is_not_claimed_again_and_its_readers_get_the_first_ones_notes():
    reads = EpisodeReads()
    url = "https://example.org/a"
    source = SourceRef(id="w-1", url=url, title="A", sha256="0" * 64)
    assert reads.claim(url) and not reads.claim(url)  # the second asker must not fetch it
    waiting = asyncio.ensure_future(reads.wait(url))
    await asyncio.sleep(0)
    assert not waiting.done()  # it waits for the first one's notes
    reads.publish(url, source, [Note(source_id="w-1", text="fact")])
    assert await waiting == (source, [Note(source_id="w-1", text="fact")])
    assert await reads.wait("https://example.org/never-claimed") is None  # a resumed episode reads it itself
    reads.claim("https://example.org/broken")
    reads.publish("https://example.org/broken", None)  # a page that could not be read frees its waiters
    assert await reads.wait("https://example.org/broken") == (None, [])


async def test_a_page_another_researcher_read_is_reused_with_its_source_id_and_notes(tmp_path):
    response, fetched, notes_calls = await _episode(tmp_path, "q05")
    assert response.meta["sources_shared"] >= 1  # q05's researchers want some of the same pages
    assert len(notes_calls) == len(fetched) == len(set(fetched))  # one fetch and one note-taking per URL
    assert response.meta["sources_read"] == len(set(fetched))
