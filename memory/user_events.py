"""Each user's ingested history events, in arrival order, with idempotent adds.

Backends that keep raw events use this rather than their own dicts, so "skip known event ids" and
"most recent first" mean the same thing in every backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import digest_of
from atelier.memory.persona_first import PersonaFirstBackend, Personas, history_only


class UserEvents:
    def __init__(self) -> None:
        self._by_user: dict[str, dict[str, HistoryEvent]] = {}

    def unseen(self, user_id: str, events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        """The events not stored yet (first of each id), in the order given; nothing is stored."""
        store = self._by_user.get(user_id, {})
        fresh: dict[str, HistoryEvent] = {}
        for event in events:
            if event.id not in store:
                fresh.setdefault(event.id, event)
        return list(fresh.values())

    def add(self, user_id: str, events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        """Store the events not seen before (by id) and return them, in the order given.

        Backends that derive state from new events store them only once that state is built, so
        a failed LLM call leaves them unseen and a retried ingest processes them again."""
        new = self.unseen(user_id, events)
        store = self._by_user.setdefault(user_id, {})
        for event in new:
            store[event.id] = event
        return new

    def forget(self, user_id: str, ids: Iterable[str]) -> None:
        """Drop these events of the user (an ingest that failed half-way takes back what it added)."""
        store = self._by_user.get(user_id, {})
        for event_id in ids:
            store.pop(event_id, None)

    def events(self, user_id: str) -> list[HistoryEvent]:
        return list(self._by_user.get(user_id, {}).values())

    def ids(self, user_id: str) -> set[str]:
        return set(self._by_user.get(user_id, {}))

    def known(self, user_id: str, ids: Iterable[str]) -> list[str]:
        """`ids` that are real events of this user, de-duplicated, order kept (drops invented ids)."""
        store = self._by_user.get(user_id, {})
        seen: set[str] = set()
        out: list[str] = []
        for event_id in ids:
            if event_id in store and event_id not in seen:
                seen.add(event_id)
                out.append(event_id)
        return out


def most_recent_first(events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
    """Dated events by date (descending), then undated ones in reverse arrival order."""
    order = {e.id: i for i, e in enumerate(events)}
    return sorted(events, key=lambda e: (e.timestamp is not None, e.timestamp or "", order[e.id]), reverse=True)


class RawHistoryBackend(PersonaFirstBackend):
    """A backend whose ingest only keeps the raw events (per user, idempotent); its work happens
    at recall (`full`, `query_profile`, `selected`)."""

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._events = UserEvents()
        self._personas = Personas()  # the explicit persona, which its context puts first (memory/persona_first.py)

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            self._personas.take(user_id, events)
            self._events.add(user_id, events)

    def history(self, user_id: str) -> list[HistoryEvent]:
        """The user's events but the explicit persona, in arrival order."""
        return history_only(self._events.events(user_id))

    async def state_digest(self, user_id: str) -> str:
        return digest_of(self._events.events(user_id))
