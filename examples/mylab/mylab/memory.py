"""KeywordMemory: recall the user's history events that share the most words with the query.

A memory backend is a subclass of `atelier.memory.base.MemoryBackend` with two verbs, `ingest` and
`context`, a typed config (its options, validated like a built-in's) and `state_digest` (what a
resumed run checks its rebuilt memory against). The explicit persona, when the setting gives one,
is kept whole and first (`pack_events` does that, and records what the budget cut).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field

from atelier.benchmarks.case import ExplicitPersona, HistoryEvent
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.budget import pack_events

WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    "a an and are as at be by for from how i in is it me my of on or the to what which with you".split()
)


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.casefold()) if w not in STOPWORDS and len(w) > 1}


class KeywordConfig(MemoryConfig):
    k: int = Field(default=3, gt=0, le=100, description="History events recalled at most.")
    min_overlap: int = Field(default=1, ge=1, description="Words an event must share with the query.")


class KeywordMemory(MemoryBackend):
    name = "keyword"
    config_model = KeywordConfig
    config: KeywordConfig

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._events: dict[str, dict[str, HistoryEvent]] = {}

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            held = self._events.setdefault(user_id, {})
            for event in events:
                held.setdefault(event.id, event)  # an id seen before is skipped: ingest is idempotent

    def ranked(self, user_id: str, query: str) -> list[tuple[HistoryEvent, int]]:
        """The user's history events sharing at least `min_overlap` words with the query, best first."""
        asked = words(query)
        scored = [
            (event, len(asked & words(event.render())))
            for event in self._events.get(user_id, {}).values()
            if not isinstance(event, ExplicitPersona)
        ]
        scored = [(e, s) for e, s in scored if s >= self.config.min_overlap]
        return sorted(scored, key=lambda pair: -pair[1])[: self.config.k]

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        held = list(self._events.get(user_id, {}).values())
        personas = [e for e in held if isinstance(e, ExplicitPersona)]
        ranked = self.ranked(user_id, as_query(query).text)
        packed = pack_events([*personas[-1:], *(e for e, _ in ranked)], self.budget(budget))
        return UserContext(
            backend=self.name,
            form="raw" if packed.ids else "none",
            text=packed.text,
            event_ids=packed.ids,
            scores={e.id: float(s) for e, s in ranked if e.id in packed.ids},
            tokens=packed.tokens,
            degraded=packed.degraded("recall"),
            share=packed.share(),
        )

    async def state_digest(self, user_id: str) -> str:
        return digest_of(list(self._events.get(user_id, {}).values()))
