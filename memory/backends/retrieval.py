"""`retrieval`: rank the user's history events for the query by BM25, dense similarity, or both.

- `method`: `bm25` (bm25s, per-user index), `dense` (our embedder's vectors in chromadb, one
  collection per user; the local MiniLM by default; an event longer than `passage_words` words is
  embedded as overlapping passages and scores as its best one), `hybrid` (reciprocal-rank fusion
  of the two).
- `expansion`: the query alone, or followed by an LLM expansion (BESPOKE §4.4: `cot` aspects or a
  `pseudo_history` entry, HyDE-style), one gateway call per recall.
- `conversation`: previous turns of the conversation join the query, either concatenated into
  one query or — the default mode — searched one by one and fused with turn weights (the query
  weighs 1, the previous turn `weight`, each turn further back `decay` times less): BM25 scores
  are summed with those weights (one query whose terms carry their turn's weight); dense
  similarities become per-turn softmax distributions that are mixed (`turn_mixture`), so a vague
  turn counts little. `hybrid` fuses the turns within each method, then the methods by RRF.
- `form`: the top `k` events as raw history packed into the budget in rank order, or a query-aware
  profile of them written by one LLM call (BESPOKE Table 23, as the `selected` backend does).

Event ids come back in rank order with their scores (method scores, or mixture weights when
turns are mixed), so history retrieval can be scored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atelier.agents.profiler import build_query_profile
from atelier.agents.query_expansion import expand_query
from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.budget import pack, render_event
from atelier.memory.embedders import memory_embedder
from atelier.memory.history_text import history_text
from atelier.memory.persona_first import PersonaFirstBackend, Personas
from atelier.memory.profile_text import profile_context
from atelier.memory.registry import register_backend
from atelier.memory.retrieval.dense import DenseIndex
from atelier.memory.retrieval.event_store import EventStore
from atelier.memory.retrieval.fusion import Ranking, reciprocal_rank_fusion, turn_mixture, weighted_sum
from atelier.memory.retrieval.lexical import LexicalIndex, Stemming, StopWords
from atelier.memory.steps import memory_step


class ConversationConfig(BaseModel):
    """How previous turns of the conversation join the query."""

    model_config = ConfigDict(extra="forbid")

    turns: int = Field(default=0, ge=0, description="Previous turns used, most recent first (0 = the query alone).")
    responses: bool = Field(
        default=False, description="Each previous turn with the system's response to it, when the data has it."
    )
    mode: Literal["fusion", "concat"] = Field(
        default="fusion",
        description="fusion: search each turn and mix the rankings; concat: one query of the turns, then the query.",
    )
    weight: float = Field(default=0.5, ge=0, description="fusion: weight of the previous turn (the query weighs 1).")
    decay: float = Field(default=0.5, gt=0, le=1, description="fusion: weight multiplier per turn further back.")
    temperature: float = Field(
        default=0.05, gt=0, description="fusion, dense: softmax temperature over each turn's cosine similarities."
    )


class RetrievalConfig(MemoryConfig):
    backend: Literal["retrieval"] = "retrieval"
    method: Literal["bm25", "dense", "hybrid"] = Field(default="dense", description="How events are ranked.")
    k: int = Field(default=10, gt=0, description="Events returned at most (then cut to the token budget).")
    candidates: int = Field(default=100, gt=0, description="Events each method retrieves per query text before fusion.")
    rrf_k: int = Field(default=60, ge=1, description="hybrid: the reciprocal-rank fusion constant.")
    expansion: Literal["none", "cot", "pseudo_history"] = Field(
        default="none", description="LLM query expansion (BESPOKE): CoT aspects or a pseudo history entry."
    )
    conversation: ConversationConfig = Field(
        default_factory=ConversationConfig, description="Previous turns of the conversation added to the query."
    )
    form: Literal["raw", "profile"] = Field(
        default="raw", description="Retrieved events as raw history, or as a query-aware LLM profile of them."
    )
    history_tokens: int = Field(default=4000, ge=100, description="profile form: retrieved history the profiler reads.")
    embedder: str = Field(
        default="local",
        min_length=1,
        description="'local' (MiniLM), 'local-bf16' (MiniLM in bfloat16: ~2x faster ingest on CPUs with AMX, slower without), 'local-int8' (MiniLM with int8 linear layers: ~1.5x faster on any x86 CPU), or a litellm embedding model.",
    )
    embedder_api_base: str | None = Field(default=None, description="Endpoint of the embedding model, if not local.")
    embedder_api_key_env: str | None = Field(default=None, description="Environment variable holding its API key.")
    embed_batch_size: int = Field(default=256, gt=0, description="Texts per embedding call at ingest.")
    passage_words: int = Field(
        default=150, gt=0, description="dense: events longer than this many words are embedded as passages this long."
    )
    passage_overlap: int = Field(default=30, ge=0, description="dense: words shared by consecutive passages.")
    stemmer: Stemming = Field(default="english", description="bm25: Snowball stemmer (PyStemmer) or none.")
    stopwords: StopWords = Field(default="english", description="bm25: stop words removed from events and queries.")

    @model_validator(mode="after")
    def _enough_candidates(self) -> RetrievalConfig:
        if self.candidates < self.k:
            raise ValueError(f"candidates ({self.candidates}) must be at least k ({self.k})")
        if self.passage_overlap >= self.passage_words:
            raise ValueError(
                f"passage_overlap ({self.passage_overlap}) must be below passage_words ({self.passage_words})"
            )
        return self


@register_backend
class RetrievalMemory(PersonaFirstBackend):
    name = "retrieval"
    config_model = RetrievalConfig
    config: RetrievalConfig
    # its events file and chromadb collections are the state, written as ingested (the events after
    # the vectors), and a later process reopens them: nothing to rebuild
    persists_state = True

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        store = self.env.store_dir
        # kept whole and first, not ranked; in the store beside the events, which a later process reopens
        self._personas = Personas(store / "retrieval" / "personas" if store else None)
        self.events = EventStore(store / "retrieval" / "events" if store else None)
        self.lexical = (
            LexicalIndex(self.events, self.config.stemmer, self.config.stopwords)
            if self.config.method in ("bm25", "hybrid")
            else None
        )
        self.dense = None
        if self.config.method in ("dense", "hybrid"):
            embedder = memory_embedder(
                self.config.embedder,
                self.config.embedder_api_base,
                self.config.embedder_api_key_env,
                self.config.embed_batch_size,
            )
            self.dense = DenseIndex(
                embedder,
                store / "retrieval" / "chroma" if store else None,
                self.config.passage_words,
                self.config.passage_overlap,
            )

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            events = self._personas.take(user_id, events)  # kept whole and first, not ranked
            await asyncio.to_thread(self.events.check_unchanged, user_id, events)  # before the vectors: refused whole
            if self.dense is not None:  # first: it skips what its collection holds, so a failed ingest can be retried
                await asyncio.to_thread(self.dense.add, user_id, events)
            new = await asyncio.to_thread(self.events.add, user_id, events)
            if new and self.lexical is not None:
                await asyncio.to_thread(self.lexical.refresh, user_id)

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the events ranked for the query."""
        query = as_query(query)
        with memory_step("recall"):
            texts = await self.query_texts(query)
            ranking = await asyncio.to_thread(self.rank, user_id, texts)
            events = self.events.get(user_id, list(ranking)[: self.config.k])
            if not events:
                return UserContext(backend=self.name, form="none")
            if self.config.form == "raw":
                budget = self.budget(budget)
                packed = pack(((e.id, render_event(e)) for e in events), budget)
                return UserContext(
                    backend=self.name,
                    form="raw" if packed.ids else "none",
                    text=packed.text,
                    event_ids=packed.ids,
                    scores={i: ranking[i] for i in packed.ids},
                    tokens=packed.tokens,
                    degraded=packed.degraded("recall", "retrieved events", budget),
                )
            history = history_text(events, self.config.history_tokens)
            profile = await build_query_profile(
                self.env.gateway, self.env.role, query.text, history.text, query.previous_turns
            )
        context = profile_context(
            self.name,
            profile.blocks(),
            history.event_ids,
            self.budget(budget),
            history.degraded("recall", "the profiler", self.config.history_tokens),
        )
        context.scores = {i: ranking[i] for i in context.event_ids}
        return context

    async def query_texts(self, query: MemoryQuery) -> list[str]:
        """What is searched: the (expanded) query, then the previous turns (fusion) — or all in one (concat)."""
        current = query.text
        if self.config.expansion != "none":
            expansion = await expand_query(
                self.env.gateway, self.env.role, self.config.expansion, query.text, query.previous_turns
            )
            current = f"{query.text}\n{expansion}" if expansion else query.text
        conversation = self.config.conversation
        previous = query.turn_texts(conversation.responses)[-conversation.turns :] if conversation.turns else []
        if conversation.mode == "concat":
            return ["\n".join([*previous, current])]
        return [current, *reversed(previous)]

    def rank(self, user_id: str, texts: Sequence[str]) -> Ranking:
        """The user's events ranked for the query texts (the query first, then earlier turns)."""
        conversation = self.config.conversation
        weights = [1.0] + [conversation.weight * conversation.decay**back for back in range(len(texts) - 1)]
        depth = self.config.candidates
        rankings = []
        if self.lexical is not None:
            rankings.append(weighted_sum(self.lexical.search(user_id, texts, depth), weights))
        if self.dense is not None:
            per_text = self.dense.search(user_id, texts, depth)
            rankings.append(
                per_text[0] if len(texts) == 1 else turn_mixture(per_text, weights, conversation.temperature)
            )
        if len(rankings) == 1:
            return rankings[0]
        return reciprocal_rank_fusion(rankings, k=self.config.rrf_k)

    async def state_digest(self, user_id: str) -> str:
        """The stored events (the lexical index follows from them), how many vectors hold them, and
        the explicit persona when one was given (it leads every context)."""
        events = await asyncio.to_thread(self.events.events, user_id)
        vectors = await asyncio.to_thread(self.dense.count, user_id) if self.dense is not None else 0
        persona = self._personas.get(user_id)
        return digest_of({"events": events, "vectors": vectors, **({"persona": persona} if persona else {})})

    async def aclose(self) -> None:
        if self.dense is not None:
            self.dense.close()
