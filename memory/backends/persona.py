"""`persona`: the user's explicit structured persona — the upper bound of PDR-Bench (§5.3, Table 2).

It keeps the ExplicitPersona events it is given (Case.view("persona") exposes the persona as one
such event; other events are ignored) and renders the latest one's facets: all of them in schema
order (`facets = "all"`, what PDR-Bench gives its agents), or the ones most similar to the query
first (`facets = "relevant"`), always cut to the budget. The context cites the persona event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from atelier.benchmarks.case import ExplicitPersona, HistoryEvent, persona_facets
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.facets import Facet, FacetRanker, FacetSelection, select_facets
from atelier.memory.persona_first import persona_not_kept
from atelier.memory.registry import register_backend


class PersonaConfig(MemoryConfig):
    backend: Literal["persona"] = "persona"
    facets: FacetSelection = Field(
        default="all",
        description="`all`: every facet in schema order; `relevant`: facets most similar to the query first.",
    )
    max_facets: int | None = Field(default=None, gt=0, description="At most this many facets (after ordering).")
    embedder: str = Field(default="local", description="Embedder ranking facets when facets = relevant.")


@register_backend
class PersonaMemory(MemoryBackend):
    name = "persona"
    config_model = PersonaConfig
    config: PersonaConfig

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._personas: dict[str, ExplicitPersona] = {}
        self._ranker = FacetRanker(self.config.embedder)

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            for event in events:
                if isinstance(event, ExplicitPersona):
                    self._personas[user_id] = event  # a later persona supersedes an earlier one

    async def state_digest(self, user_id: str) -> str:
        return digest_of(self._personas.get(user_id))

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        persona = self._personas.get(user_id)
        if persona is None:
            return UserContext(backend=self.name, form="none")
        facets = [Facet(path, value, (persona.id,)) for path, value in persona_facets(persona.attributes)]
        packed = await select_facets(
            facets, as_query(query).text, self.budget(budget), self.config.facets, self._ranker, self.config.max_facets
        )
        left_out = len(facets) - len(packed.facets)
        # the persona not whole: said as such (how many facets, and why), not as history cut
        degraded = (
            [
                persona_not_kept(
                    self.name,
                    persona,
                    f"{left_out} of {len(facets)} facets left out ("
                    + (f"max_facets = {self.config.max_facets}, " if self.config.max_facets else "")
                    + f"{self.budget(budget)}-token budget)",
                    count=left_out,
                )
            ]
            if left_out
            else []
        )
        if not packed.facets:
            return UserContext(backend=self.name, form="none", degraded=degraded)
        return UserContext(
            backend=self.name,
            form="persona",
            text=packed.text,
            event_ids=[persona.id],
            tokens=packed.tokens,
            degraded=degraded,
        )
