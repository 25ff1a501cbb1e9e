"""`hierarchical`: MemoryOS-style short / mid / long-term memory (PDR-Bench §5.4 "Memory OS").

Ingest streams events through the tiers (see memory/hierarchy.py for the data and the heat):
each event becomes a short-term page; when the queue is full, its oldest `evict_batch` pages get
topic summaries (one LLM call) and join mid-term topic sessions; after every event the hottest
session, if its heat reaches `promotion_heat`, is promoted: its unanalysed pages update the
long-term profile and add private facts (two LLM calls, run together as in MemoryOS).

Recall makes no LLM call: the query is embedded, mid-term sessions are searched (visits raise
their heat), long-term facts ranked, and the context combines, in this order and within the
budget: the long-term profile, the relevant facts, the retrieved mid-term pages, then the short-
term pages (most recent first). Defaults are MemoryOS's.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from atelier.agents.memory_curator import analyze_profile, extract_knowledge, summarize_topics
from atelier.agents.models.embeddings import Embedder, get_embedder
from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common.degradation import degradation
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.budget import pack, render_event
from atelier.memory.hierarchy import (
    Fact,
    FactMatch,
    HeatWeights,
    LongTermMemory,
    MidTermMemory,
    Page,
    PageMatch,
    TopicSession,
)
from atelier.memory.persona_first import PersonaFirstBackend, Personas
from atelier.memory.registry import register_backend
from atelier.memory.steps import memory_step
from atelier.memory.user_events import UserEvents


class HierarchicalConfig(MemoryConfig):
    backend: Literal["hierarchical"] = "hierarchical"
    short_term_capacity: int = Field(default=10, ge=1, description="Pages in the short-term FIFO queue.")
    evict_batch: int = Field(
        default=1, ge=1, description="Pages moved to mid-term together when the queue is full (one LLM call each move)."
    )
    mid_term_capacity: int = Field(
        default=2000, ge=1, description="Topic sessions kept; beyond it the least retrieved goes."
    )
    topic_similarity_threshold: float = Field(
        default=0.6,
        description="Join an existing session when cosine(summary) + keyword_weight x Jaccard(keywords) >= this.",
    )
    keyword_weight: float = Field(default=1.0, ge=0, description="Weight of keyword overlap when matching sessions.")
    heat_alpha: float = Field(default=1.0, ge=0, description="Heat per retrieval visit (N_visit).")
    heat_beta: float = Field(
        default=1.0, ge=0, description="Heat per page added since the last promotion (L_interaction)."
    )
    heat_gamma: float = Field(default=1.0, ge=0, description="Weight of recency exp(-hours / recency_tau_hours).")
    recency_tau_hours: float = Field(default=24.0, gt=0, description="Recency time scale in hours.")
    promotion_heat: float = Field(default=5.0, gt=0, description="Heat at which a session is promoted to long-term.")
    long_term_capacity: int = Field(
        default=100, ge=1, description="Long-term private facts kept (oldest dropped first)."
    )
    top_sessions: int = Field(default=5, ge=1, description="Mid-term sessions searched per query.")
    session_threshold: float = Field(default=0.1, description="Minimum query-summary similarity of a searched session.")
    page_threshold: float = Field(default=0.1, description="Minimum query-page similarity of a retrieved page.")
    max_pages: int = Field(default=7, ge=0, description="Mid-term pages retrieved per query (MemoryOS's queue).")
    max_facts: int = Field(default=20, ge=0, description="Long-term facts retrieved per query.")
    fact_threshold: float = Field(default=0.01, description="Minimum query-fact similarity.")
    embedder: str = Field(default="local", description="Embedder for pages, topic summaries, facts and queries.")


@dataclass
class UserTiers:
    """One user's memory: the short-term queue, mid-term topic sessions, long-term profile and facts."""

    short_term: deque[Page]
    mid_term: MidTermMemory
    long_term: LongTermMemory
    unsummarized: int = 0  # evicted batches the summarizer gave no topic for (their raw text stood in)


@dataclass(frozen=True)
class _Item:
    """One piece of a context: its tier, its text and the events behind it."""

    key: str
    tier: Literal["profile", "fact", "page", "recent"]
    text: str
    event_ids: Sequence[str]


# event ids, most relevant first: retrieved pages (by similarity), facts, the profile, recent pages
_TIER_RANK = {"page": 0, "fact": 1, "profile": 2, "recent": 3}


@register_backend
class HierarchicalMemory(PersonaFirstBackend):
    name = "hierarchical"
    config_model = HierarchicalConfig
    config: HierarchicalConfig
    recall_changes_state = True  # a search raises the heat of the sessions it visits

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._events = UserEvents()
        self._personas = Personas()  # kept whole and first, not paged into the tiers (memory/persona_first.py)
        self._users: dict[str, UserTiers] = {}
        self._embedder: Embedder | None = None
        self.weights = HeatWeights(
            self.config.heat_alpha, self.config.heat_beta, self.config.heat_gamma, self.config.recency_tau_hours
        )

    # ------------------------------------------------------------------ helpers

    def _user(self, user_id: str) -> UserTiers:
        if user_id not in self._users:
            self._users[user_id] = UserTiers(
                short_term=deque(),
                mid_term=MidTermMemory(self.config.mid_term_capacity, self.weights),
                long_term=LongTermMemory(self.config.long_term_capacity),
            )
        return self._users[user_id]

    def tiers(self, user_id: str) -> UserTiers | None:
        return self._users.get(user_id)

    async def _embed(self, texts: list[str]) -> np.ndarray:
        if self._embedder is None:
            self._embedder = get_embedder(self.config.embedder)
        return await asyncio.to_thread(self._embedder.embed, texts)

    # ------------------------------------------------------------------ ingest

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        """All of `events` or none of them: a failed LLM call puts the tiers back as they were, so
        the ingest retried later (in this process, or replayed from a journal) makes the same steps."""
        async with self.user_lock(user_id):
            new = self._events.unseen(user_id, self._personas.take(user_id, events))  # the persona: first, whole
            if not new:
                return
            before = copy.deepcopy(self._users.get(user_id))
            memory = self._user(user_id)
            try:
                with memory_step("ingest"):
                    for event in new:
                        if len(memory.short_term) >= self.config.short_term_capacity:
                            await self._move_to_mid_term(memory)
                        memory.short_term.append(Page(event.id, render_event(event)))
                        self._events.add(user_id, [event])  # promotion may cite it
                        await self._promote_if_hot(user_id, memory)
            except BaseException:
                self._events.forget(user_id, [event.id for event in new])
                if before is None:
                    del self._users[user_id]
                else:
                    self._users[user_id] = before
                raise

    async def _move_to_mid_term(self, memory: UserTiers) -> None:
        batch = list(memory.short_term)[: self.config.evict_batch]
        pages_text = "\n".join(p.text for p in batch)
        topics = await summarize_topics(self.env.gateway, self.env.role, pages_text)
        summaries = [f"{t.theme}: {t.content}" for t in topics] or [pages_text]
        memory.unsummarized += not topics  # recorded: every recall from this memory says so
        keywords = [t.keywords for t in topics] or [[]]
        vectors = await self._embed([p.text for p in batch] + summaries)
        for page, vector in zip(batch, vectors):
            page.vector = vector
        now = self.now()
        for summary, words, vector in zip(summaries, keywords, vectors[len(batch) :]):
            memory.mid_term.insert(
                summary, words, vector, batch, now, self.config.topic_similarity_threshold, self.config.keyword_weight
            )
        for _ in batch:
            memory.short_term.popleft()

    async def _promote_if_hot(self, user_id: str, memory: UserTiers) -> None:
        session, heat = memory.mid_term.hottest(self.now())
        if session is None or heat < self.config.promotion_heat or not session.unanalyzed():
            return
        await self._promote(user_id, memory, session)

    async def _promote(self, user_id: str, memory: UserTiers, session: TopicSession) -> None:
        pages = session.unanalyzed()
        page_ids = [p.event_id for p in pages]
        pages_text = "\n".join(p.text for p in pages)
        long_term = memory.long_term
        traits, facts = await asyncio.gather(
            analyze_profile(self.env.gateway, self.env.role, long_term.traits, pages_text),
            extract_knowledge(self.env.gateway, self.env.role, pages_text),
        )
        for trait in traits:  # a trait may cite any real event of the user (it merges the old profile)
            trait.event_ids = self._events.known(user_id, trait.event_ids)
        long_term.traits = traits
        long_term.add_sources(page_ids)
        if facts:
            vectors = await self._embed([f.fact for f in facts])
            for fact, vector in zip(facts, vectors):
                cited = [i for i in dict.fromkeys(fact.event_ids) if i in page_ids]
                long_term.facts.append(Fact(fact.fact.strip(), cited or page_ids, vector))
        memory.mid_term.mark_promoted(session, self.now())

    # ------------------------------------------------------------------ recall

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the tiers' pages, facts and profile."""
        memory = self._users.get(user_id)
        if memory is None or not self._events.ids(user_id):
            return UserContext(backend=self.name, form="none")
        async with self.user_lock(user_id):  # a search updates session heat
            query_vector = (await self._embed([as_query(query).text]))[0]
            pages = memory.mid_term.search(
                query_vector,
                self.now(),
                self.config.top_sessions,
                self.config.session_threshold,
                self.config.page_threshold,
                self.config.max_pages,
            )
            facts = memory.long_term.search_facts(query_vector, self.config.max_facts, self.config.fact_threshold)
        return self._combine(memory, pages, facts, self.budget(budget))

    async def state_digest(self, user_id: str) -> str:
        """The tiers as plain data: pages, sessions with their heat counters and times, the profile
        and the facts (vectors left out: they follow from the texts)."""
        memory = self._users.get(user_id)
        if memory is None:
            return digest_of({"events": []})
        mid = memory.mid_term
        return digest_of(
            {
                "events": [e.id for e in self._events.events(user_id)],
                "short_term": [p.event_id for p in memory.short_term],
                "sessions": [
                    {
                        "id": s.id,
                        "summary": s.summary,
                        "keywords": s.keywords,
                        "pages": list(s.pages),
                        "visits": s.visits,
                        "length": s.length,
                        "retrievals": s.retrievals,
                        "analyzed": s.analyzed,
                        "last_visit": repr(s.last_visit),
                    }
                    for s in mid.sessions.values()
                ],
                "sessions_opened": mid.sessions_opened,
                **({"unsummarized": memory.unsummarized} if memory.unsummarized else {}),
                "traits": memory.long_term.traits,
                "profile_sources": memory.long_term.profile_sources,
                "facts": [[f.text, f.event_ids] for f in memory.long_term.facts],
            }
        )

    def _combine(self, memory: UserTiers, pages: list[PageMatch], facts: list[FactMatch], budget: int) -> UserContext:
        long_term = memory.long_term
        sections: list[tuple[str, list[_Item]]] = []
        if long_term.traits:
            profile = "\n".join(t.render() for t in long_term.traits)
            sections.append(("User profile", [_Item("profile", "profile", profile, long_term.profile_sources)]))
        if facts:
            sections.append(
                (
                    "Facts about the user",
                    [_Item(f"fact:{i}", "fact", f"- {m.fact.text}", m.fact.event_ids) for i, m in enumerate(facts)],
                )
            )
        if pages:
            sections.append(
                (
                    "Related memories",
                    [_Item(f"page:{m.page.event_id}", "page", m.page.text, [m.page.event_id]) for m in pages],
                )
            )
        if memory.short_term:
            sections.append(
                (
                    "Recent history",
                    [
                        _Item(f"recent:{p.event_id}", "recent", p.text, [p.event_id])
                        for p in reversed(memory.short_term)
                    ],
                )
            )
        items = {item.key: item for _, section in sections for item in section}
        packed = pack(
            (
                (item.key, f"# {heading}\n{item.text}" if i == 0 else item.text)  # the heading rides on its first item
                for heading, section in sections
                for i, item in enumerate(section)
            ),
            budget,
        )
        degraded = packed.degraded("recall", "memory items", budget)
        if memory.unsummarized:
            detail = (
                f"the topic summarizer gave no topic for {memory.unsummarized} batch(es) of evicted pages; "
                "their raw text stood in as the mid-term topic"
            )
            degraded.append(degradation("empty_answer", "ingest", detail, count=memory.unsummarized))
        if not packed.ids:
            return UserContext(backend=self.name, form="none", degraded=degraded)
        included = sorted((items[k] for k in packed.ids), key=lambda item: _TIER_RANK[item.tier])
        page_scores = {m.page.event_id: round(m.score, 6) for m in pages}
        return UserContext(
            backend=self.name,
            form="profile" if any(item.tier in ("profile", "fact") for item in included) else "raw",
            text=packed.text,
            event_ids=list(dict.fromkeys(i for item in included for i in item.event_ids)),
            scores={item.event_ids[0]: page_scores[item.event_ids[0]] for item in included if item.tier == "page"},
            tokens=packed.tokens,
            degraded=degraded,
        )
