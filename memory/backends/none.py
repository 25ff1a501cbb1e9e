"""`none`: no memory at all — the non-personalised baseline. It gives no context, not even the
explicit persona a setting gives (`persona`, `persona+context`): that is recorded as a
`persona_not_kept` degradation, so a run that pairs the two says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext, digest_of
from atelier.memory.persona_first import Personas, persona_not_kept
from atelier.memory.registry import register_backend


class NoneConfig(MemoryConfig):
    backend: Literal["none"] = "none"


@register_backend
class NoMemory(MemoryBackend):
    name = "none"
    config_model = NoneConfig
    keeps_state = False

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._personas = Personas()  # only to say it was given and not kept

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        self._personas.take(user_id, events)

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        persona = self._personas.get(user_id)
        if persona is None:
            return UserContext(backend=self.name, form="none")
        return UserContext(
            backend=self.name, form="none", degraded=[persona_not_kept(self.name, persona, "it gives no context")]
        )

    async def state_digest(self, user_id: str) -> str:
        return digest_of(None)
