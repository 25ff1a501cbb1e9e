"""`full`: the raw history, most recent first, cut to the budget; the explicit persona (when the
setting exposes it) first and whole, counted in the budget (`memory.budget.pack_events`)."""

from __future__ import annotations

from typing import Literal

from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext
from atelier.memory.budget import pack_events
from atelier.memory.registry import register_backend
from atelier.memory.user_events import RawHistoryBackend, most_recent_first


class FullConfig(MemoryConfig):
    backend: Literal["full"] = "full"


@register_backend
class FullHistory(RawHistoryBackend):
    name = "full"
    config_model = FullConfig

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        events = most_recent_first(self._events.events(user_id))
        budget = self.budget(budget)
        packed = pack_events(events, budget)
        return UserContext(
            backend=self.name,
            form="raw" if packed.ids else "none",
            text=packed.text,
            event_ids=packed.ids,
            tokens=packed.tokens,
            degraded=packed.degraded("recall"),
            share=packed.share(),
        )
