"""`none`: no memory at all — the non-personalised baseline."""

from __future__ import annotations

from typing import Literal, Sequence

from benchmarks.case import HistoryEvent
from memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext
from memory.registry import register_backend


class NoneConfig(MemoryConfig):
    backend: Literal["none"] = "none"


@register_backend
class NoMemory(MemoryBackend):
    name = "none"
    config_model = NoneConfig

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        return None

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return UserContext(backend=self.name, form="none")
