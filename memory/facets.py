"""Persona facets (`Section > Subsection > Field: value`) and choosing the ones a query needs.

Shared by the explicit `persona` backend and the distilled `persona_model`: both hold a persona in
the PDR schema and either render it whole or rank its facets against the query with an embedder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from atelier.agents.models.embeddings import Embedder, get_embedder
from atelier.benchmarks.common.degradation import Degradation
from atelier.memory.budget import pack

FacetSelection = Literal["all", "relevant"]


@dataclass(frozen=True)
class Facet:
    path: str
    value: str
    event_ids: tuple[str, ...] = field(default=())

    def render(self) -> str:
        return f"{self.path}: {self.value}"


@dataclass(frozen=True)
class PackedFacets:
    text: str
    facets: list[Facet]
    tokens: int
    scores: dict[str, float]
    degraded: list[Degradation] = field(default_factory=list)  # facets the budget left out


class FacetRanker:
    """Cosine similarity between the query and each rendered facet; vectors cached per text."""

    def __init__(self, embedder_name: str) -> None:
        self.embedder_name = embedder_name
        self._embedder: Embedder | None = None
        self._vectors: dict[str, np.ndarray] = {}

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self._embedder is None:
            self._embedder = get_embedder(self.embedder_name)
        return self._embedder.embed(texts)

    def _rank_sync(self, query: str, facets: Sequence[Facet]) -> list[tuple[Facet, float]]:
        missing = list(dict.fromkeys(f.render() for f in facets if f.render() not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self._embed(missing)))
        query_vector = self._embed([query])[0]
        scored = [(i, f, float(self._vectors[f.render()] @ query_vector)) for i, f in enumerate(facets)]
        scored.sort(key=lambda item: (-item[2], item[0]))
        return [(f, score) for _, f, score in scored]

    async def rank(self, query: str, facets: Sequence[Facet]) -> list[tuple[Facet, float]]:
        """Facets most similar to the query first (ties keep schema order)."""
        if not facets:
            return []
        return await asyncio.to_thread(self._rank_sync, query, facets)


async def select_facets(
    facets: Sequence[Facet],
    query: str,
    budget: int,
    selection: FacetSelection,
    ranker: FacetRanker,
    max_facets: int | None = None,
) -> PackedFacets:
    """`all`: every facet in schema order; `relevant`: most similar to the query first. Then cut
    to `max_facets` and packed into `budget` tokens (whole facets only, except a first one that
    alone is too long)."""
    scores: dict[str, float] = {}
    if selection == "relevant":
        ranked = await ranker.rank(query, facets)
        ordered = [f for f, _ in ranked]
        scores = {f.path: round(score, 6) for f, score in ranked}
    else:
        ordered = list(facets)
    if max_facets is not None:
        ordered = ordered[:max_facets]
    by_path = {f.path: f for f in ordered}
    packed = pack(((f.path, f.render()) for f in ordered), budget)
    kept = [by_path[p] for p in packed.ids]
    return PackedFacets(
        text=packed.text,
        facets=kept,
        tokens=packed.tokens,
        scores={p: scores[p] for p in packed.ids if p in scores},
        degraded=packed.degraded("recall", "persona facets", budget),
    )
