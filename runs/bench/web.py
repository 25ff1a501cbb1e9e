"""`atelier bench web`: search latency on a corpus and fetch + extract throughput from the sandbox.

Everything is measured end to end through the same path a run uses: the `searxng` provider over
HTTP to the sandbox web, and the `direct` reader (guarded httpx + trafilatura) for pages. Queries
are document titles (the expected article is known, so top-1 accuracy is reported too) and
document descriptions (recall@10 of the described document).
"""

from __future__ import annotations

import asyncio
import random
import time

import numpy as np
from pydantic import BaseModel, Field

from atelier.tools.config import RankerName, SandboxConfig, WebConfig
from atelier.tools.sandbox.corpus import Document, load_corpus
from atelier.tools.sandbox.ranking import build_ranker
from atelier.tools.sandbox.server import SandboxWeb
from atelier.tools.web import Web, build_web


class WebBenchmarkSettings(BaseModel):
    corpus: str = "wiki"
    ranker: RankerName = "bm25"
    queries: int = Field(default=200, ge=2)
    pages: int = Field(default=300, ge=1)
    concurrency: int = Field(default=8, ge=1)
    seed: int = 0


def _latency_summary(seconds: list[float]) -> dict[str, float]:
    millis = np.asarray(seconds) * 1000.0
    return {
        "p50": round(float(np.percentile(millis, 50)), 3),
        "p95": round(float(np.percentile(millis, 95)), 3),
        "mean": round(float(millis.mean()), 3),
        "max": round(float(millis.max()), 3),
    }


async def _measure_search(web: Web, ranker, documents: list[Document]) -> dict:
    title_docs = documents[: len(documents) // 2]
    described = [doc for doc in documents[len(documents) // 2 :] if doc.description]
    for doc in documents[:5]:  # warm the connection pool and the tokenizer
        await web.search(doc.title)
    http_latency: list[float] = []
    ranker_latency: list[float] = []
    title_hits = described_hits = 0
    for doc, query in [(doc, doc.title) for doc in title_docs] + [(doc, doc.description) for doc in described]:
        started = time.perf_counter()
        results = await web.search(query, 10)
        http_latency.append(time.perf_counter() - started)
        started = time.perf_counter()
        ranker.rank(query, 10)
        ranker_latency.append(time.perf_counter() - started)
        urls = [result.url for result in results]
        if query == doc.title:
            title_hits += bool(urls) and urls[0] == doc.url
        else:
            described_hits += doc.url in urls
    return {
        "queries": len(http_latency),
        "latency_ms": _latency_summary(http_latency),
        "ranker_only_latency_ms": _latency_summary(ranker_latency),
        "title_query_top1": round(title_hits / max(len(title_docs), 1), 4),
        "description_query_recall_at_10": round(described_hits / max(len(described), 1), 4),
    }


async def _measure_fetch(web: Web, documents: list[Document], concurrency: int) -> dict:
    gate = asyncio.Semaphore(concurrency)

    async def fetch(doc: Document) -> int:
        async with gate:
            page = await web.fetch(doc.url)
            return len(page.text)

    started = time.perf_counter()
    lengths = await asyncio.gather(*(fetch(doc) for doc in documents))
    elapsed = time.perf_counter() - started
    return {
        "pages": len(documents),
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "pages_per_s": round(len(documents) / elapsed, 1),
        "mean_text_chars": round(float(np.mean(lengths)), 1),
        "empty_pages": int(sum(1 for length in lengths if length == 0)),
    }


async def run_web_benchmark(settings: WebBenchmarkSettings) -> dict:
    started = time.perf_counter()
    corpus = load_corpus(settings.corpus)
    loaded = time.perf_counter()
    ranker = build_ranker(corpus, settings.ranker)
    indexed = time.perf_counter()
    rng = random.Random(settings.seed)
    query_docs = rng.sample(corpus.documents, min(settings.queries, len(corpus)))
    page_docs = rng.sample(corpus.documents, min(settings.pages, len(corpus)))
    with SandboxWeb(corpus, ranker) as sandbox:
        sandbox_settings = SandboxConfig(corpus=settings.corpus, ranker=settings.ranker, url=sandbox.base_url)
        async with build_web(WebConfig(mode="live", sandbox=sandbox_settings)) as web:
            search = await _measure_search(web, ranker, query_docs)
            fetch = await _measure_fetch(web, page_docs, settings.concurrency)
    return {
        "corpus": settings.corpus,
        "documents": len(corpus),
        "ranker": settings.ranker,
        "load_s": round(loaded - started, 3),
        "index_s": round(indexed - loaded, 3),
        "search": search,
        "fetch_extract": fetch,
        "targets": {
            "search_p95_ms_max": 30,
            "search_p95_met": search["latency_ms"]["p95"] <= 30,
            "fetch_pages_per_s_min": 50,
            "fetch_met": fetch["pages_per_s"] >= 50,
        },
    }
