"""The memory protocol: two verbs, `ingest(user_id, events)` and `context(user_id, query, budget)`.

A backend turns a user's history into the context a system sees. `context` returns a
`UserContext`: the prompt text, the ids of the history events it drew on (most relevant first, so
history retrieval can be scored) and its form (raw events, a profile, an explicit persona).
Backends are async-safe: ingest and recall may run concurrently for different users and cases.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atelier.agents.models.gateway import Gateway
from atelier.benchmarks.case import CaseView, ConversationTurn, HistoryEvent
from atelier.benchmarks.common.degradation import Degradation
from atelier.memory.clock import read_clock

ContextForm = Literal["none", "raw", "profile", "persona"]


class MemoryQuery(BaseModel):
    """What the memory is asked about: the query text and, optionally, the conversation so far
    (each previous turn's utterance and the system's response to it, when known)."""

    model_config = ConfigDict(extra="forbid")

    text: str
    previous_turns: list[ConversationTurn] = Field(default_factory=list)

    @field_validator("previous_turns", mode="before")
    @classmethod
    def _utterances(cls, turns: Any) -> Any:
        """Plain strings are utterances with no recorded response."""
        if isinstance(turns, (list, tuple)):
            return [ConversationTurn(utterance=t) if isinstance(t, str) else t for t in turns]
        return turns

    def turn_texts(self, responses: bool = False) -> list[str]:
        """Each previous turn as one text: its utterance, followed by the response if asked for."""
        return [
            f"{t.utterance}\n{t.response}" if responses and t.response else t.utterance for t in self.previous_turns
        ]


QueryMode = Literal["raw", "resolved", "context"]
QUERY_MODES: tuple[str, ...] = get_args(QueryMode)


def memory_query(view: CaseView, mode: QueryMode = "context") -> MemoryQuery:
    """How a case asks memory: `raw` (the utterance as typed), `resolved` (the manual rewrite when
    the data has one, e.g. iKAT; else the raw text), `context` (the raw utterance with the
    conversation so far — what the episode graph passes; backends choose whether to use it)."""
    query = view.query
    if mode == "raw":
        return MemoryQuery(text=query.text)
    if mode == "resolved":
        return MemoryQuery(text=query.resolved or query.text)
    return MemoryQuery(text=query.text, previous_turns=list(query.previous_turns))


class ContextShare(BaseModel):
    """How much of what the memory was offered a context kept under its token budget (PDR Tables 2
    and 3 give context systems the whole synthesized context: a budget that keeps less is shown)."""

    model_config = ConfigDict(extra="forbid")

    budget_tokens: int = Field(description="The budget the context was built under.")
    events_offered: int = Field(description="History events offered, the explicit persona included.")
    events_kept: int
    tokens_offered: int = Field(description="What all the offered events take, rendered for the prompt.")
    tokens_kept: int
    persona_tokens: int = Field(
        default=0, description="The explicit persona's tokens: kept whole and first, counted in the budget."
    )

    @property
    def share(self) -> float:
        """The share of the offered tokens kept (1.0 when nothing was offered)."""
        return 1.0 if self.tokens_offered <= 0 else min(1.0, self.tokens_kept / self.tokens_offered)

    @property
    def over_budget(self) -> int:
        """Tokens over the budget: only an explicit persona larger than the budget (never cut) makes any."""
        return max(0, self.tokens_kept - self.budget_tokens)


class UserContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str
    form: ContextForm = "none"
    text: str = ""
    event_ids: list[str] = Field(default_factory=list, description="History events used, most relevant first.")
    scores: dict[str, float] = Field(default_factory=dict, description="Ranking score per event id, if ranked.")
    tokens: int = Field(default=0, ge=0, description="The context's tokens, as the backend counted them.")
    degraded: list[Degradation] = Field(
        default_factory=list, description="What the memory could not give (history cut by its budget, ...)."
    )
    share: ContextShare | None = Field(
        default=None, description="Raw-history contexts: the budget and how much of the history it kept."
    )


class MemoryConfig(BaseModel):
    """Base of every backend's typed config (`backend` names the registered backend)."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    budget_tokens: int = Field(default=2000, gt=0, description="Default context budget in tokens.")


@dataclass
class MemoryEnv:
    """What a backend may use: the gateway for LLM calls (role `memory`), and a directory for
    persistent stores (one per run and system)."""

    gateway: Gateway = field(default_factory=Gateway)
    store_dir: Path | None = None
    role: str = "memory"


class MemoryBackend(ABC):
    name: ClassVar[str]
    config_model: ClassVar[type[MemoryConfig]]
    # How a run's later process gets this backend's state back (memory/journal.py): False, it is
    # rebuilt by replaying the run's memory journal; True, the backend's own store under `store_dir`
    # holds it exactly and is reopened.
    persists_state: ClassVar[bool] = False
    # True when recall changes what later recalls or ingests see (hierarchical: a search heats sessions).
    recall_changes_state: ClassVar[bool] = False
    # False for a backend that keeps nothing (`none`): there is nothing to journal or rebuild.
    keeps_state: ClassVar[bool] = True

    def __init__(self, config: MemoryConfig, env: MemoryEnv | None = None) -> None:
        self.config = config
        self.env = env or MemoryEnv()
        self._user_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.clock: Callable[[], float] = time.time  # seconds; tests substitute their own

    def now(self) -> float:
        """The time as this backend's state records it: its clock, read through the clock tape of the
        operation in progress (memory/clock.py), so a replayed operation sees the times it first saw."""
        return read_clock(self.clock)

    def user_lock(self, user_id: str) -> asyncio.Lock:
        """Serialises ingestion per user (different users proceed in parallel)."""
        return self._user_locks[user_id]

    @abstractmethod
    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        """Add events to the user's memory. Events already ingested (same id) are skipped."""

    @abstractmethod
    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """The user's context for `query`, at most `budget` tokens (default: the config's)."""

    async def aclose(self) -> None:
        """Release stores and connections."""

    async def state_digest(self, user_id: str) -> str | None:
        """A digest of everything the backend holds about the user (None: it cannot tell). Two
        backends with equal digests give equal contexts for every query: a rebuilt memory is checked
        against the digest its journal recorded."""
        return None

    def reset_store(self) -> None:
        """Forget what an earlier process left in the store (`store_dir`), before the run's memory
        journal rebuilds it; a backend whose store `persists_state` keeps it."""

    def budget(self, budget: int | None) -> int:
        return budget if budget is not None else self.config.budget_tokens


def as_query(query: MemoryQuery | str) -> MemoryQuery:
    return query if isinstance(query, MemoryQuery) else MemoryQuery(text=query)


def digest_of(state: Any) -> str:
    """The sha256 of `state` as canonical JSON (sorted keys; pydantic models and sets as plain data)."""

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        raise TypeError(f"not JSON: {type(value).__name__}")

    text = json.dumps(state, sort_keys=True, ensure_ascii=False, default=plain)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
