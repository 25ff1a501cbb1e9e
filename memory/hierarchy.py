"""The tiers of a MemoryOS-style memory (Kang et al., 2025; BAI-LAB/MemoryOS), without the LLM.

- Short-term: a FIFO queue of recent pages (one page = one history event).
- Mid-term: topic sessions of pages. Pages leaving short-term join the session whose summary is
  most similar (cosine of summary embeddings + `keyword_weight` x Jaccard of keywords) if that
  score reaches the threshold, else open a new session. Each session has a heat
      H = alpha * N_visit + beta * L_interaction + gamma * R_recency,   R_recency = exp(-dt / tau)
  where N_visit counts retrievals that matched its pages, L_interaction the pages added since its
  last promotion, and dt the time since its last visit or update. Over capacity, the least
  frequently retrieved session is evicted (LFU).
- Long-term: the user profile (traits) and private facts (a bounded FIFO), fed by promotion: when
  the hottest session reaches the heat threshold, its unanalysed pages go to the LLM, and the
  session's N_visit and L_interaction are reset to 0.

Times are seconds from the backend's clock; `tau_hours` sets the recency scale (MemoryOS: 24 h).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from atelier.agents.memory_curator import ProfileTrait


@dataclass(frozen=True)
class HeatWeights:
    alpha: float = 1.0  # per visit
    beta: float = 1.0  # per page added since the last promotion
    gamma: float = 1.0  # recency
    tau_hours: float = 24.0


@dataclass
class Page:
    event_id: str
    text: str
    vector: np.ndarray | None = None


@dataclass
class TopicSession:
    id: str
    summary: str
    keywords: set[str]
    vector: np.ndarray
    last_visit: float
    pages: dict[str, Page] = field(default_factory=dict)
    visits: int = 0
    length: int = 0
    retrievals: int = 0  # LFU count; unlike `visits` it is never reset
    analyzed: set[str] = field(default_factory=set)

    def recency(self, now: float, weights: HeatWeights) -> float:
        hours = max(0.0, now - self.last_visit) / 3600.0
        return math.exp(-hours / weights.tau_hours)

    def heat(self, now: float, weights: HeatWeights) -> float:
        return weights.alpha * self.visits + weights.beta * self.length + weights.gamma * self.recency(now, weights)

    def unanalyzed(self) -> list[Page]:
        return [p for p in self.pages.values() if p.event_id not in self.analyzed]


def _keyword_set(keywords) -> set[str]:
    return {k.strip().lower() for k in keywords if k.strip()}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


@dataclass
class PageMatch:
    page: Page
    score: float


class MidTermMemory:
    def __init__(self, capacity: int, weights: HeatWeights) -> None:
        self.capacity = capacity
        self.weights = weights
        self.sessions: dict[str, TopicSession] = {}
        self._next_id = 1

    @property
    def sessions_opened(self) -> int:
        """Topic sessions opened so far (evicted ones included): the next one's number, minus one."""
        return self._next_id - 1

    def match_score(
        self, session: TopicSession, vector: np.ndarray, keywords: set[str], keyword_weight: float
    ) -> float:
        return float(session.vector @ vector) + keyword_weight * jaccard(session.keywords, keywords)

    def insert(
        self,
        summary: str,
        keywords,
        vector: np.ndarray,
        pages: list[Page],
        now: float,
        threshold: float,
        keyword_weight: float,
    ) -> TopicSession:
        """Add pages under a topic: into the best-matching session if it scores >= threshold,
        else into a new one. A page already in the session is not counted twice."""
        keywords = _keyword_set(keywords)
        best = max(
            self.sessions.values(),
            key=lambda s: self.match_score(s, vector, keywords, keyword_weight),
            default=None,
        )
        if best is None or self.match_score(best, vector, keywords, keyword_weight) < threshold:
            best = TopicSession(
                id=f"topic-{self._next_id}", summary=summary, keywords=keywords, vector=vector, last_visit=now
            )
            self._next_id += 1
            self.sessions[best.id] = best
        added = [p for p in pages if p.event_id not in best.pages]
        best.pages.update((p.event_id, p) for p in added)
        best.length += len(added)
        best.last_visit = now
        if len(self.sessions) > self.capacity:
            self._evict_least_retrieved(keep=best.id)
        return best

    def _evict_least_retrieved(self, keep: str) -> None:
        candidates = [s for s in self.sessions.values() if s.id != keep]
        victim = min(candidates, key=lambda s: (s.retrievals, s.last_visit))
        del self.sessions[victim.id]

    def hottest(self, now: float) -> tuple[TopicSession | None, float]:
        best = max(self.sessions.values(), key=lambda s: s.heat(now, self.weights), default=None)
        return best, (best.heat(now, self.weights) if best else 0.0)

    def mark_promoted(self, session: TopicSession, now: float) -> None:
        session.analyzed.update(session.pages)
        session.visits = 0
        session.length = 0
        session.last_visit = now

    def search(
        self,
        query: np.ndarray,
        now: float,
        top_sessions: int,
        session_threshold: float,
        page_threshold: float,
        max_pages: int,
    ) -> list[PageMatch]:
        """Pages of the sessions most similar to the query, best first, at most `max_pages`.
        Each session with a matching page counts a visit (its heat rises)."""
        ranked = sorted(self.sessions.values(), key=lambda s: float(s.vector @ query), reverse=True)[:top_sessions]
        matches: dict[str, PageMatch] = {}
        for session in ranked:
            if float(session.vector @ query) < session_threshold:
                continue
            found = [PageMatch(p, float(p.vector @ query)) for p in session.pages.values() if p.vector is not None]
            found = [m for m in found if m.score >= page_threshold]
            if not found:
                continue
            session.visits += 1
            session.retrievals += 1
            session.last_visit = now
            for match in found:
                if match.page.event_id not in matches or matches[match.page.event_id].score < match.score:
                    matches[match.page.event_id] = match
        return sorted(matches.values(), key=lambda m: m.score, reverse=True)[:max_pages]


@dataclass
class Fact:
    text: str
    event_ids: list[str]
    vector: np.ndarray


@dataclass
class FactMatch:
    fact: Fact
    score: float


class LongTermMemory:
    def __init__(self, fact_capacity: int) -> None:
        self.traits: list[ProfileTrait] = []
        self.profile_sources: list[str] = []  # every page ever analysed into the profile
        self.facts: deque[Fact] = deque(maxlen=fact_capacity)

    def add_sources(self, event_ids) -> None:
        self.profile_sources = list(dict.fromkeys([*self.profile_sources, *event_ids]))

    def search_facts(self, query: np.ndarray, top_k: int, threshold: float) -> list[FactMatch]:
        scored = [FactMatch(f, float(f.vector @ query)) for f in self.facts]
        return sorted((m for m in scored if m.score >= threshold), key=lambda m: m.score, reverse=True)[:top_k]
