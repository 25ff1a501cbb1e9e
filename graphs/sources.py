"""What a pipeline read, kept once: texts stored by sha256, graph state holding only `SourceRef`s.

`SourceStore` writes each text a system read (a page's extracted text, a gold information item)
under `<run_dir>/sources/<sha[:2]>/<sha>.txt` (without a run folder: the Atelier cache), so
checkpoints stay small, a resumed episode reads exactly the same text again, and a judge can
look up exactly what the system saw by the sha256 its citations carry.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from cachetools import LRUCache
from pydantic import BaseModel

from atelier.agents.citations import CitationReport, SourceRef
from atelier.agents.response import Citation
from atelier.benchmarks.common.atomic_files import write_if_absent
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.data_files import cache_dir
from atelier.tools.errors import ReplayMiss, WebError
from atelier.tools.urls import web_source_id
from atelier.tools.web import Web

SOURCES_DIR = "sources"  # in the run folder


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def gold_source_id(text: str) -> str:
    return "g-" + text_sha256(text)[:12]


class SourceStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._root = os.fspath(self.root)  # file names are built as strings: pathlib's joins cost more than a read
        self._recent: LRUCache[str, str] = LRUCache(maxsize=256)  # texts put or read last

    @classmethod
    def for_run(cls, run_dir: str | None) -> SourceStore:
        return cls(Path(run_dir) / SOURCES_DIR if run_dir else cache_dir() / SOURCES_DIR)

    def _path(self, sha: str) -> str:
        return f"{self._root}/{sha[:2]}/{sha}.txt"

    def put(self, text: str) -> str:
        sha = text_sha256(text)
        if self._recent.get(sha) is not None:  # written or read by this store already: on disk
            return sha
        write_if_absent(self._path(sha), text, redact=False)  # named by the sha256 of this very text
        self._recent[sha] = text
        return sha

    async def aput(self, text: str) -> str:
        """`put` from a graph node: a text not yet written is written off the event loop."""
        sha = text_sha256(text)
        return sha if self._recent.get(sha) is not None else await asyncio.to_thread(self.put, text)

    def has(self, sha: str) -> bool:
        """Whether a text with this sha256 is stored."""
        return self._recent.get(sha) is not None or os.path.isfile(self._path(sha))

    def get(self, sha: str) -> str:
        text = self._recent.get(sha)
        if text is not None:
            return text
        try:
            with open(self._path(sha), encoding="utf-8") as file:
                text = file.read()
        except FileNotFoundError:
            raise LookupError(f"no stored text with sha256 {sha} under {self.root}") from None
        self._recent[sha] = text
        return text

    def gold_source(self, text: str, number: int) -> SourceRef:
        return SourceRef(
            id=gold_source_id(text),
            kind="gold",
            title=f"Gold information {number}",
            sha256=self.put(text),
            chars=len(text),
        )


class WebHit(BaseModel):
    """A search result worth reading: where it is, and which query found it at which rank."""

    url: str
    title: str = ""
    query: str = ""
    rank: int = 1


async def search_web(
    web: Web, queries: Sequence[str], per_query: int, limit: int, skip: Sequence[str] = (), *, step: str = "search"
) -> tuple[list[WebHit], list[Degradation]]:
    """Run `queries` in parallel; the best `limit` results not in `skip`, best rank first (ties: the
    order of the queries). Returns the hits and a `search_failed` degradation per search that gave
    no results: one that failed, and one that found nothing at all (a search whose results were all
    in `skip`, read already, found something). A search missing from a replayed web is not a
    degradation: it fails the episode (`ReplayMiss`), so a replay never answers from less web than
    was recorded."""

    async def one(query: str):
        try:
            results = await web.search(query, per_query)
        except ReplayMiss:
            raise
        except WebError as exc:
            return degradation("search_failed", step, f"{query!r}: {exc}")
        return results if results else degradation("search_failed", step, f"{query!r}: no results")

    outcomes = await asyncio.gather(*(one(q) for q in queries))
    failures = [o for o in outcomes if isinstance(o, Degradation)]
    ranked = sorted(
        (
            (result.rank, i, WebHit(url=result.url, title=result.title, query=q, rank=result.rank))
            for i, (q, results) in enumerate(zip(queries, outcomes))
            if not isinstance(results, Degradation)
            for result in results
        ),
        key=lambda item: (item[0], item[1]),
    )
    hits: dict[str, WebHit] = {}
    for _, _, hit in ranked:
        if hit.url not in skip and hit.url not in hits:
            hits[hit.url] = hit
    return list(hits.values())[:limit], failures


async def read_web_sources(
    web: Web, store: SourceStore, hits: Sequence[WebHit], *, step: str = "read"
) -> tuple[list[SourceRef], list[Degradation]]:
    """Fetch the hits' pages in parallel through the run's web; keep each page's text in the store.
    Returns the sources read (in the order of `hits`) and a `fetch_failed` degradation per page that
    could not be read. A page missing from a replayed web fails the episode (`ReplayMiss`)."""

    async def one(hit: WebHit) -> SourceRef | Degradation:
        url = hit.url
        try:
            page = await web.fetch(url)
        except ReplayMiss:
            raise
        except WebError as exc:
            said = str(exc)  # a web error names its URL first, mostly
            return degradation("fetch_failed", step, said if said.startswith(f"{url}: ") else f"{url}: {said}")
        if not page.text.strip():
            return degradation("fetch_failed", step, f"{url}: no text extracted")
        title = page.title or hit.title
        return SourceRef(
            id=web_source_id(page.url),
            url=page.url,
            title=title,
            sha256=await store.aput(page.text),
            chars=len(page.text),
        )

    outcomes = await asyncio.gather(*(one(hit) for hit in hits))
    return ([o for o in outcomes if isinstance(o, SourceRef)], [o for o in outcomes if isinstance(o, Degradation)])


def citation_degradations(report: CitationReport, step: str) -> list[Degradation]:
    """The citation check's removals, as degradations: markers naming no source the system read,
    the URLs the model's own source list (removed) named that the system never read, and URLs in
    the text that name no source read (a link a page planted, or one the model made up)."""
    stats = report.stats
    # `check_citations` counts each removal (ints) and lists what it removed
    removed = int(cast(int, stats.get("unresolved_removed") or 0))
    unread = int(cast(int, stats.get("model_list_unread_urls") or 0))
    planted = int(cast(int, stats.get("urls_removed") or 0))
    found = [
        (
            removed,
            f"cited [{', '.join(map(str, cast(list[int], stats.get('unresolved_numbers') or [])))}] "
            f"but read {stats.get('sources_read')} sources",
        ),
        (
            unread,
            f"the model's own source list (removed) named {unread} URLs the system never read: "
            + ", ".join(cast(list[str], stats.get("model_list_unread") or [])),
        ),
        (
            planted,
            f"{planted} URL(s) named no source read, removed: "
            + ", ".join(cast(list[str], stats.get("removed_urls") or [])[:3]),
        ),
    ]
    return [degradation("citation_removed", step, detail, count=count) for count, detail in found if count]


def uncited(citations: Sequence[Citation], step: str) -> list[Degradation]:
    """`no_findings` for a report that cites nothing: whatever it says rests on no source."""
    return [] if citations else [degradation("no_findings", step, "the report cites no source")]


class CitedUrl(BaseModel):
    """A URL a system's answer cites (a provider's or an agent's citation), with the [n] it is cited by."""

    url: str
    title: str = ""
    number: int


class CitedPage(BaseModel):
    """What became of one cited URL: read (its text kept under `sha256`) or not (`problem`)."""

    cited: CitedUrl
    read: SourceRef | None = None
    problem: str | None = None

    def citation(self) -> Citation:
        return Citation(
            source_id=web_source_id(self.cited.url),
            url=self.cited.url,
            title=self.cited.title or (self.read.title if self.read else None) or None,
            sha256=self.read.sha256 if self.read else None,
            number=self.cited.number,
        )

    def line(self) -> str:
        """Its entry in a report's source list."""
        title = self.cited.title or (self.read.title if self.read else "") or self.cited.url
        problem = (self.problem or "").removeprefix(f"{self.cited.url}: ")  # the URL is on the line already
        what = f"read, sha256 {self.read.sha256[:12]}" if self.read else f"not read: {problem}"
        return f"[{self.cited.number}] {title}. {self.cited.url} ({what})"


async def read_cited_pages(
    web: Web, store: SourceStore, cited: Sequence[CitedUrl], *, step: str
) -> tuple[list[CitedPage], list[Degradation]]:
    """Fetch each URL a system cites through the run's web (cache, replay, `web_log.jsonl`) and keep
    its text in the store, so its citation carries the sha256 of what the page said. A page that
    cannot be read stays cited, with the reason, and is a `fetch_failed` degradation; a page missing
    from a replayed web fails the episode (`ReplayMiss`)."""
    # one fetch per URL, so each outcome stays with its citation
    outcomes = await asyncio.gather(
        *(read_web_sources(web, store, [WebHit(url=c.url, title=c.title)], step=step) for c in cited)
    )
    pages, degraded = [], []
    for c, (refs, problems) in zip(cited, outcomes):
        degraded += problems
        pages.append(
            CitedPage(cited=c, read=refs[0] if refs else None, problem=problems[0].detail if problems else None)
        )
    return pages, degraded
