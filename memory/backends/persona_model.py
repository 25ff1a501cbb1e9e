"""`persona_model`: history distilled into a structured persona (PDR schema), kept up to date.

On ingest only the new events are read (in chunks of `chunk_tokens`, one LLM call each) together
with the current persona; the model returns updates for just the facets those events touch, and
every other facet stays as it was. Each facet remembers the events it came from: the ids the model
cited, or — when it cites none that are real — every event of the chunk that produced the update,
so provenance is never lost, only coarser.

At recall the facets most similar to the query (`facets = "relevant"`, the default) or all of them
in schema order are returned, with the events behind them as the context's event ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from atelier.agents.persona_distiller import FACET_PATHS, distil_persona, nest_facets
from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.facets import Facet, FacetRanker, FacetSelection, select_facets
from atelier.memory.history_text import history_chunks
from atelier.memory.persona_first import PersonaFirstBackend, Personas
from atelier.memory.registry import register_backend
from atelier.memory.steps import memory_step
from atelier.memory.user_events import UserEvents


class PersonaModelConfig(MemoryConfig):
    backend: Literal["persona_model"] = "persona_model"
    chunk_tokens: int = Field(default=4000, ge=200, description="New-history tokens read per distillation call.")
    facets: FacetSelection = Field(
        default="relevant",
        description="`relevant`: facets most similar to the query first; `all`: every known facet in schema order.",
    )
    max_facets: int | None = Field(default=12, gt=0, description="At most this many facets per context.")
    embedder: str = Field(default="local", description="Embedder ranking facets against the query.")


@dataclass
class _FacetState:
    value: str
    event_ids: list[str] = field(default_factory=list)


@register_backend
class PersonaModel(PersonaFirstBackend):
    name = "persona_model"
    config_model = PersonaModelConfig
    config: PersonaModelConfig

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._events = UserEvents()
        self._facets: dict[str, dict[str, _FacetState]] = {}
        self._personas = Personas()  # the explicit persona: whole and first, before the distilled one
        self._ranker = FacetRanker(self.config.embedder)

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            new = self._events.unseen(user_id, self._personas.take(user_id, events))
            if not new:
                return
            facets = {
                path: _FacetState(s.value, list(s.event_ids)) for path, s in self._facets.get(user_id, {}).items()
            }
            with memory_step("ingest"):
                for chunk in history_chunks(new, self.config.chunk_tokens):
                    current = {path: facets[path].value for path in FACET_PATHS if path in facets}
                    answer = await distil_persona(self.env.gateway, self.env.role, current, chunk.text)
                    for update in answer.updates:
                        if not update.value.strip():
                            continue
                        cited = [i for i in dict.fromkeys(update.event_ids) if i in chunk.event_ids]
                        state = facets.setdefault(update.facet, _FacetState(update.value))
                        state.value = update.value.strip()
                        state.event_ids = list(dict.fromkeys([*state.event_ids, *(cited or chunk.event_ids)]))
            self._facets[user_id] = facets
            self._events.add(user_id, new)

    def facets(self, user_id: str) -> list[Facet]:
        """The user's known facets in schema order, each with the events it came from."""
        state = self._facets.get(user_id, {})
        return [Facet(p, state[p].value, tuple(state[p].event_ids)) for p in FACET_PATHS if p in state]

    async def state_digest(self, user_id: str) -> str:
        facets = {path: [s.value, s.event_ids] for path, s in self._facets.get(user_id, {}).items()}
        return digest_of({"events": self._events.events(user_id), "facets": facets})

    def persona(self, user_id: str) -> dict:
        """The distilled persona in the nested PDR layout (like `personas_en.jsonl.gz` records)."""
        return nest_facets({f.path: f.value for f in self.facets(user_id)})

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the persona distilled from the history."""
        facets = self.facets(user_id)
        if not facets:
            return UserContext(backend=self.name, form="none")
        packed = await select_facets(
            facets, as_query(query).text, self.budget(budget), self.config.facets, self._ranker, self.config.max_facets
        )
        if not packed.facets:
            return UserContext(backend=self.name, form="none", degraded=packed.degraded)
        event_ids = list(dict.fromkeys(i for f in packed.facets for i in f.event_ids))
        scores: dict[str, float] = {}
        for f in packed.facets:  # an event scores as its best facet
            for event_id in f.event_ids:
                if f.path in packed.scores:
                    scores[event_id] = max(scores.get(event_id, float("-inf")), packed.scores[f.path])
        return UserContext(
            backend=self.name,
            form="persona",
            text=packed.text,
            event_ids=event_ids,
            scores=scores,
            tokens=packed.tokens,
            degraded=packed.degraded,
        )
