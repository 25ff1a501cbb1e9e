"""`none`: no memory at all — the non-personalised baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext, digest_of
from atelier.memory.registry import register_backend


class NoneConfig(MemoryConfig):
    backend: Literal["none"] = "none"


@register_backend
class NoMemory(MemoryBackend):
    name = "none"
    config_model = NoneConfig
    keeps_state = False

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        return None

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return UserContext(backend=self.name, form="none")

    async def state_digest(self, user_id: str) -> str:
        return digest_of(None)
