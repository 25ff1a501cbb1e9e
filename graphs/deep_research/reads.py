"""One URL is fetched and noted once per episode, whichever researcher asked for it.

A round's researchers run in parallel (`Send`), so graph state cannot tell one of them what another
is reading at that moment; this per-episode store can. The first researcher that wants a URL
*claims* it: it fetches the page, takes its notes and *publishes* the source with its notes. Any
other researcher of the episode that wants the URL (at the same time or later) is handed that
source and those notes, tied to the same source id, without a fetch or a model call of its own.

No deadlock: a researcher publishes every URL it claimed before it waits for anyone else's, and an
owner waits for nothing between claiming and publishing (a page that could not be fetched is
published at once, as nothing).

The store lives in this process, on the run's state (graphs/resources.py `episode_store`), keyed by
the episode id the graph keeps in its state, and is dropped when the report is written or with the run. An episode resumed in another process starts with an
empty store: a URL it was waiting for is then read by the researcher itself (`wait` returns None).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from atelier.agents.citations import SourceRef
from atelier.benchmarks.common.degradation import Degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.deep_research.state import Note
from atelier.graphs.resources import drop_episode_store, episode_store
from atelier.graphs.sources import SourceStore, WebHit, read_web_sources
from atelier.tools.web import Web

Read = tuple[SourceRef | None, list[Note]]


class EpisodeReads:
    """What an episode's researchers have read, by URL: the source and its notes (None: unreadable)."""

    def __init__(self) -> None:
        self._claims: dict[str, asyncio.Future[Read]] = {}

    def claim(self, url: str) -> bool:
        """True: the caller reads `url` and must `publish` it. False: someone else has it (`wait`)."""
        if url in self._claims:
            return False
        self._claims[url] = asyncio.get_running_loop().create_future()
        return True

    def publish(self, url: str, source: SourceRef | None, notes: Sequence[Note] = ()) -> None:
        claim = self._claims.get(url)
        if claim is not None and not claim.done():
            claim.set_result((source, list(notes)))

    async def wait(self, url: str) -> Read | None:
        """What the researcher that claimed `url` read there; None when no one claimed it in this process."""
        claim = self._claims.get(url)
        if claim is None:
            return None
        return await asyncio.shield(claim)


def episode_reads(context: EpisodeContext, episode: str) -> EpisodeReads:
    return episode_store(context, "reads", episode, EpisodeReads)


def forget_episode(context: EpisodeContext, episode: str) -> None:
    drop_episode_store(context, "reads", episode)


async def fetch_claimed(
    web: Web, store: SourceStore, reads: EpisodeReads, hits: Sequence[WebHit], *, step: str = "read"
) -> tuple[list[SourceRef], list[str], list[Degradation]]:
    """Fetch the pages of `hits` the caller claimed, in parallel: the sources read, the URL each was
    claimed under, and a degradation per page that could not be read (published at once as nothing,
    so no one waits for it)."""
    outcomes = await asyncio.gather(*(read_web_sources(web, store, [hit], step=step) for hit in hits))
    sources: list[SourceRef] = []
    claims: list[str] = []
    failures: list[Degradation] = []
    for hit, (read, failed) in zip(hits, outcomes):
        failures += failed
        if read:
            sources.append(read[0])
            claims.append(hit.url)
        else:
            reads.publish(hit.url, None)
    return sources, claims, failures
