"""`atelier bench memory`: ingest throughput, recall latency and peak memory of a backend at scale.

The synthetic history has N events spread over ceil(N / events_per_user) users, 500 events each by
default: between a PDR-Bench or BESPOKE user (tens to a few hundred sessions) and a LoCoMo
conversation (about 600 turns). Events are notes, search sessions and short chats built from
seeded templates over 24 topics (10-40 words each, like real memory snippets and PTKB lines), so
users share vocabulary and ranking has real work to do. Queries (1,000 by default) go to random
users; recall latency is the wall time of one `context` call, query embedding included.
"""

from __future__ import annotations

import asyncio
import math
import random
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from atelier.benchmarks.case import (
    ChatMessage,
    ChatSession,
    HistoryEvent,
    MemorySnippet,
    SearchQueryRecord,
    SearchSession,
)
from atelier.memory.base import MemoryBackend, MemoryQuery

TOPICS = (
    "running",
    "cooking",
    "index funds",
    "travel in Portugal",
    "gardening",
    "photography",
    "python programming",
    "jazz piano",
    "parenting toddlers",
    "sleep",
    "home brewing",
    "chess openings",
    "bird watching",
    "climbing",
    "electric cars",
    "mortgage rates",
    "learning Japanese",
    "sourdough baking",
    "yoga",
    "board games",
    "astronomy",
    "woodworking",
    "vegan recipes",
    "marathon training",
)
OPINIONS = ("love", "am curious about", "struggle with", "want to get better at", "am tired of", "keep reading about")
FORMATS = ("short bullet lists", "step-by-step guides", "detailed explanations", "comparison tables", "worked examples")
CONSTRAINTS = (
    "on a tight budget",
    "with only weekends free",
    "after a knee injury",
    "living in a small flat",
    "with two kids at home",
    "while travelling a lot for work",
    "as a complete beginner",
    "with years of practice",
)
QUESTIONS = (
    "What should I read next about {topic}?",
    "Plan my week around {topic}.",
    "Any tips for {topic} {constraint}?",
    "How do I get started with {topic}?",
    "Compare the best options for {topic}.",
)


def _note(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    return (
        f"I {rng.choice(OPINIONS)} {topic} {rng.choice(CONSTRAINTS)}, and I prefer {rng.choice(FORMATS)} "
        f"when I learn about {rng.choice(TOPICS)}."
    )


def synthetic_event(rng: random.Random, user: str, index: int) -> HistoryEvent:
    event_id = f"{user}:e{index}"
    when = f"2025-{1 + index % 12:02d}-{1 + index % 28:02d}"
    kind = rng.random()
    if kind < 0.6:
        return MemorySnippet(id=event_id, timestamp=when, text=_note(rng))
    if kind < 0.8:
        topic = rng.choice(TOPICS)
        return SearchSession(
            id=event_id,
            timestamp=when,
            queries=[
                SearchQueryRecord(query=f"{topic} {rng.choice(CONSTRAINTS)}"),
                SearchQueryRecord(query=f"best {rng.choice(FORMATS)} for {topic}"),
            ],
        )
    topic = rng.choice(TOPICS)
    return ChatSession(
        id=event_id,
        timestamp=when,
        messages=[
            ChatMessage(role="user", content=f"Can you explain {topic} to me {rng.choice(CONSTRAINTS)}?"),
            ChatMessage(role="assistant", content=f"Sure: here is an overview of {topic} with {rng.choice(FORMATS)}."),
        ],
    )


def synthetic_histories(items: int, events_per_user: int, seed: int = 0) -> dict[str, list[HistoryEvent]]:
    rng = random.Random(seed)
    users = max(1, math.ceil(items / events_per_user))
    histories: dict[str, list[HistoryEvent]] = {f"user{u:05d}": [] for u in range(users)}
    names = list(histories)
    for index in range(items):
        user = names[index % users]
        histories[user].append(synthetic_event(rng, user, index))
    return histories


def synthetic_query(rng: random.Random) -> str:
    question = rng.choice(QUESTIONS).format(topic=rng.choice(TOPICS), constraint=rng.choice(CONSTRAINTS))
    return f"{question} I {rng.choice(OPINIONS)} {rng.choice(TOPICS)} and like {rng.choice(FORMATS)}."


def synthetic_queries(users: Sequence[str], count: int, seed: int = 0) -> list[tuple[str, MemoryQuery]]:
    """`count` queries to random users; the texts are (almost all) distinct, so no query-embedding
    cache can serve them."""
    rng = random.Random(seed + 1)
    return [(rng.choice(users), MemoryQuery(text=synthetic_query(rng))) for _ in range(count)]


def peak_rss_mb() -> float:
    """The process's peak resident set size so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class BenchResult:
    items: int
    users: int
    queries: int
    distinct_queries: int
    ingest_seconds: float
    recall_ms: list[float]

    def summary(self) -> dict:
        return {
            "items": self.items,
            "users": self.users,
            "events_per_user": round(self.items / self.users, 1),
            "queries": self.queries,
            "distinct_queries": self.distinct_queries,
            "ingest_seconds": round(self.ingest_seconds, 3),
            "ingest_items_per_s": round(self.items / self.ingest_seconds, 1) if self.ingest_seconds else None,
            "recall_ms_p50": round(float(np.percentile(self.recall_ms, 50)), 3),
            "recall_ms_p95": round(float(np.percentile(self.recall_ms, 95)), 3),
            "recall_ms_max": round(max(self.recall_ms), 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }


async def run_bench(
    backend: MemoryBackend,
    items: int,
    queries: int = 1000,
    events_per_user: int = 500,
    ingest_concurrency: int = 2,
    budget: int | None = None,
    seed: int = 0,
) -> BenchResult:
    """Ingest the synthetic histories (`ingest_concurrency` users at a time), then time each recall."""
    histories = synthetic_histories(items, events_per_user, seed)
    gate = asyncio.Semaphore(ingest_concurrency)

    async def ingest(user: str, events: list[HistoryEvent]) -> None:
        async with gate:
            await backend.ingest(user, events)

    started = time.perf_counter()
    await asyncio.gather(*(ingest(user, events) for user, events in histories.items()))
    ingest_seconds = time.perf_counter() - started

    latencies = []
    workload = synthetic_queries(list(histories), queries, seed)
    for user, query in workload:
        start = time.perf_counter()
        await backend.context(user, query, budget)
        latencies.append((time.perf_counter() - start) * 1000)
    distinct = len({query.text for _, query in workload})
    return BenchResult(items, len(histories), queries, distinct, ingest_seconds, latencies)
