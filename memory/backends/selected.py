"""`selected`: the LLM keeps the history sessions relevant to the query, then raw or profile form.

BESPOKE §4.2 / appendix C.3: an LLM judges each session against the query cross-encoder style
(Table 22, binary keep), only kept sessions are used, either as raw history or summarised into a
query-aware profile (Table 23) — the paper's best configuration (`form = "profile"`).

A session is one history event (a chat, a search line, a note, a PTKB statement), except that
dialogue turns of the same conversation session (LoCoMo) are judged together. The most recent
`max_sessions` are judged, `batch_size` per call (1 = one call per session, as in the paper).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from atelier.agents.profiler import build_query_profile
from atelier.agents.relevance import judge_sessions
from atelier.benchmarks.case import DialogueTurn, HistoryEvent
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query
from atelier.memory.budget import pack, render_event
from atelier.memory.history_text import history_text
from atelier.memory.profile_text import profile_context
from atelier.memory.registry import register_backend
from atelier.memory.steps import memory_step
from atelier.memory.user_events import RawHistoryBackend, most_recent_first


class SelectedConfig(MemoryConfig):
    backend: Literal["selected"] = "selected"
    form: Literal["raw", "profile"] = Field(
        default="profile", description="Kept sessions as raw history, or as a query-aware profile of them."
    )
    batch_size: int = Field(default=1, ge=1, le=50, description="Sessions judged per LLM call (1 = one per session).")
    max_sessions: int | None = Field(
        default=200, gt=0, description="Judge only the most recent sessions, at most this many (bounds cost)."
    )
    top_k: int | None = Field(
        default=None, gt=0, description="Keep at most this many relevant sessions (most recent first)."
    )
    session_tokens: int = Field(default=2000, ge=50, description="A session longer than this is cut before judging.")
    history_tokens: int = Field(
        default=8000, ge=200, description="Kept history (in tokens) the profiler reads in the profile form."
    )
    group_dialogue_turns: bool = Field(
        default=True, description="Judge dialogue turns of one conversation session together, as one session."
    )


@dataclass
class _Session:
    id: str
    events: list[HistoryEvent] = field(default_factory=list)


@register_backend
class SelectedHistory(RawHistoryBackend):
    name = "selected"
    config_model = SelectedConfig
    config: SelectedConfig

    def _session_key(self, event: HistoryEvent) -> str:
        if self.config.group_dialogue_turns and isinstance(event, DialogueTurn) and event.session:
            return f"session {event.session}"
        return event.id

    def sessions(self, user_id: str) -> list[_Session]:
        """The user's sessions, most recent first; events inside a session in arrival order (the
        explicit persona is none: it is kept whole and first)."""
        events = self.history(user_id)
        sessions: dict[str, _Session] = {}
        for event in most_recent_first(events):
            key = self._session_key(event)
            sessions.setdefault(key, _Session(key))
        for event in events:
            sessions[self._session_key(event)].events.append(event)
        return list(sessions.values())

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the sessions judged relevant."""
        query = as_query(query)
        sessions = self.sessions(user_id)[: self.config.max_sessions]
        if not sessions:
            return UserContext(backend=self.name, form="none")
        texts = [(s.id, history_text(s.events, self.config.session_tokens).text) for s in sessions]
        with memory_step("recall"):
            verdicts = await judge_sessions(
                self.env.gateway, self.env.role, query.text, texts, self.config.batch_size, query.previous_turns
            )
            kept = [s for s in sessions if s.id in verdicts and verdicts[s.id].keep][: self.config.top_k]
            events = [e for s in kept for e in s.events]
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
                    tokens=packed.tokens,
                    degraded=packed.degraded("recall", "selected events", budget),
                )
            history = history_text(events, self.config.history_tokens)
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
