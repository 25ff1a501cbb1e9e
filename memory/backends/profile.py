"""`profile` and `query_profile`: LLM profiles of the user's history (BESPOKE §4.2, appendix C.3).

`profile` is BESPOKE's general profile (Table 21), built on ingest and cached per user. It is
kept up to date incrementally: when new events arrive, only they are sent, together with the
current profile, and the model returns the updated profile (the MemoryOS-style "existing profile +
new conversation" update). A first or large batch is split into chunks of `chunk_tokens`, folded
in one call per chunk, so every event is read once and exactly once.

`query_profile` is BESPOKE's query-aware profile (Table 23) without history selection: at recall
it gives the profiler the query and the most recent history that fits `history_tokens`. (With
selection first, it is `selected` with `form = "profile"`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from atelier.agents.profiler import UserProfile, build_profile, build_query_profile
from atelier.benchmarks.case import HistoryEvent
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.history_text import history_chunks, history_text
from atelier.memory.persona_first import PersonaFirstBackend, Personas
from atelier.memory.profile_text import profile_context
from atelier.memory.registry import register_backend
from atelier.memory.steps import memory_step
from atelier.memory.user_events import RawHistoryBackend, UserEvents, most_recent_first


class ProfileConfig(MemoryConfig):
    backend: Literal["profile"] = "profile"
    chunk_tokens: int = Field(
        default=6000,
        ge=200,
        description="History tokens per profile call; more new history is folded in one call per chunk.",
    )


@register_backend
class GeneralProfile(PersonaFirstBackend):
    name = "profile"
    config_model = ProfileConfig
    config: ProfileConfig

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._events = UserEvents()
        self._profiles: dict[str, UserProfile] = {}
        self._personas = Personas()  # kept whole and first, not profiled (memory/persona_first.py)

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            new = self._events.unseen(user_id, self._personas.take(user_id, events))
            if not new:
                return
            profile = self._profiles.get(user_id)
            with memory_step("ingest"):
                for chunk in history_chunks(new, self.config.chunk_tokens):
                    profile = await build_profile(self.env.gateway, self.env.role, chunk.text, profile)
            assert profile is not None  # `new` is not empty: it made at least one chunk
            self._profiles[user_id] = profile
            self._events.add(user_id, new)

    def profile(self, user_id: str) -> UserProfile | None:
        return self._profiles.get(user_id)

    async def state_digest(self, user_id: str) -> str:
        return digest_of(
            {
                "events": self._events.events(user_id),
                "profile": self._profiles.get(user_id),
                "persona": self._personas.get(user_id),
            }
        )

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the profile."""
        profile = self._profiles.get(user_id)
        if profile is None:
            return UserContext(backend=self.name, form="none")
        built_from = [e.id for e in most_recent_first(self._events.events(user_id))]
        return profile_context(self.name, profile.blocks(), built_from, self.budget(budget))


class QueryProfileConfig(MemoryConfig):
    backend: Literal["query_profile"] = "query_profile"
    history_tokens: int = Field(
        default=8000, ge=200, description="Most recent history (in tokens) the per-query profiler reads."
    )


@register_backend
class QueryAwareProfile(RawHistoryBackend):
    name = "query_profile"
    config_model = QueryProfileConfig
    config: QueryProfileConfig

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the query-aware profile of the rest."""
        events = self.history(user_id)
        if not events:
            return UserContext(backend=self.name, form="none")
        query = as_query(query)
        history = history_text(most_recent_first(events), self.config.history_tokens)
        with memory_step("recall"):
            profile = await build_query_profile(
                self.env.gateway, self.env.role, query.text, history.text, query.previous_turns
            )
        return profile_context(
            self.name,
            profile.blocks(),
            history.event_ids,
            self.budget(budget),
            history.degraded("recall", "the profiler", self.config.history_tokens),
        )
