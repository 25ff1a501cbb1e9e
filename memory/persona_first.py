"""The user's explicit persona, kept whole and first by every backend when the setting gives one.

PDR's `persona` and `persona+context` settings give the system the user's structured persona as one
history event (`ExplicitPersona`). A backend that selects, ranks, profiles or distils history must
not lose it among the history: it is kept apart from what the backend builds (`Personas`), and
`persona_first` puts it, whole and first, before the backend's own context, its tokens counted in
the budget (like `memory.budget.pack_events`, which `full` uses; a persona is never cut). A backend
that does not keep it (`none`, which gives no context at all; `persona` when its facets are
selected or cut) says so in a `persona_not_kept` degradation. `persona_kept` is the check: the
context's first lines are the persona's facet lines, every one of them (in any order, so a
backend may rank them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from pydantic import ValidationError

from atelier.benchmarks.case import ExplicitPersona, HistoryEvent
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.common.errors import DataError
from atelier.memory.base import MemoryBackend, MemoryQuery, UserContext
from atelier.memory.budget import count_tokens, render_event


def latest_persona(events: Sequence[HistoryEvent]) -> ExplicitPersona | None:
    """The last explicit persona among `events` (a later one supersedes an earlier one)."""
    personas = [e for e in events if isinstance(e, ExplicitPersona)]
    return personas[-1] if personas else None


def history_only(events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
    """`events` without the explicit persona."""
    return [e for e in events if not isinstance(e, ExplicitPersona)]


class Personas:
    """Each user's explicit persona, kept apart from the history a backend builds its context from.
    Every ingest hands it the events (known ones too: an episode's recall ingests again, so a later
    process has the persona back before its first context). A backend whose own store is its state
    (one a later process reopens instead of ingesting again) gives `directory`: each persona is
    then written there too, one JSON file per user, and read back by a later process."""

    def __init__(self, directory: Path | None = None) -> None:
        self._by_user: dict[str, ExplicitPersona] = {}
        self._directory = directory

    def _path(self, user_id: str) -> Path | None:
        if self._directory is None:
            return None
        return self._directory / (hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:40] + ".json")

    def take(self, user_id: str, events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        """Keep the user's persona from `events`; the other events, for the backend."""
        persona = latest_persona(events)
        if persona is not None and self._by_user.get(user_id) != persona:
            self._by_user[user_id] = persona
            path = self._path(user_id)
            if path is not None:
                no_follow.make_folders(path.parent)
                write_atomically(path, persona.model_dump_json())
        return history_only(events)

    def get(self, user_id: str) -> ExplicitPersona | None:
        if user_id not in self._by_user:
            path = self._path(user_id)
            if path is not None and path.exists():
                try:
                    self._by_user[user_id] = ExplicitPersona.model_validate_json(no_follow.read_text(path))
                except ValidationError as exc:
                    raise DataError(f"{path}: not a stored explicit persona: {exc.errors()[0]['msg']}") from None
        return self._by_user.get(user_id)


def persona_lines(persona: ExplicitPersona) -> list[str]:
    return persona.render().split("\n")


def persona_kept(text: str, persona: ExplicitPersona) -> bool:
    """Whether `text` opens with the persona whole: its first lines are the persona's facet lines,
    every one (in any order), the first possibly led by the event's `[id] persona:` prefix."""
    facets = persona_lines(persona)
    head = text.split("\n")[: len(facets)]
    prefix = render_event(persona)[: -len(persona.render())] if persona.render() else ""
    if head and prefix and head[0].startswith(prefix):
        head[0] = head[0][len(prefix) :]
    return sorted(head) == sorted(facets)


def persona_not_kept(backend: str, persona: ExplicitPersona, why: str, count: int = 1) -> Degradation:
    return degradation(
        "persona_not_kept",
        "recall",
        f"the setting gave the explicit persona ({persona.id}), but the {backend} memory's context does not hold "
        f"it whole and first: {why}",
        count=count,
    )


async def persona_first(
    backend: str,
    persona: ExplicitPersona | None,
    budget: int,
    history_context: Callable[[int], Awaitable[UserContext]],
) -> UserContext:
    """The backend's context (`history_context(budget left)`) led by the persona, whole, its tokens
    counted in `budget`. A persona that leaves no budget is still kept whole (over the budget), and
    the history is then left out and counted."""
    if persona is None:
        return await history_context(budget)
    head = render_event(persona)
    persona_tokens = count_tokens(head)
    left = budget - persona_tokens - 1  # the newline after it
    if left <= 0:
        cut = degradation(
            "memory_budget_cut",
            "recall",
            f"the explicit persona alone ({persona_tokens} tokens) fills the {budget}-token budget: kept whole, "
            f"the {backend} memory's context of the history left out",
        )
        return UserContext(
            backend=backend, form="persona", text=head, event_ids=[persona.id], tokens=persona_tokens, degraded=[cut]
        )
    rest = await history_context(left)
    text = f"{head}\n{rest.text}" if rest.text else head
    share = rest.share
    if share is not None:
        share = share.model_copy(
            update={
                "budget_tokens": budget,
                "events_offered": share.events_offered + 1,
                "events_kept": share.events_kept + 1,
                "tokens_offered": share.tokens_offered + persona_tokens + 1,
                "tokens_kept": count_tokens(text),
                "persona_tokens": persona_tokens,
            }
        )
    return rest.model_copy(
        update={
            "form": rest.form if rest.text else "persona",
            "text": text,
            "event_ids": [persona.id, *(i for i in rest.event_ids if i != persona.id)],
            "tokens": count_tokens(text),
            "share": share,
        }
    )


class PersonaFirstBackend(MemoryBackend):
    """A backend whose context is the explicit persona (when the setting gives one) whole and first,
    then its own context of the history (`_history_context`) in the budget left. A subclass sets
    `self._personas` in its `__init__` and hands each ingest's events to `self._personas.take`."""

    _personas: Personas

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return await persona_first(
            self.name,
            self._personas.get(user_id),
            self.budget(budget),
            lambda left: self._history_context(user_id, query, left),
        )

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        raise NotImplementedError
