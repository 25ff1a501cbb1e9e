"""Issue 41, item 5: every backend keeps the explicit persona whole and first when the setting gives
one (`persona+context`), or says in a recorded `persona_not_kept` that it does not; a backend of
one's own that loses it silently is caught where the episode recalls its memory."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from atelier.benchmarks.case import ExplicitPersona, HistoryEvent
from atelier.benchmarks.registry import load_cases
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryEnv, MemoryQuery, UserContext, memory_query
from atelier.memory.budget import count_tokens
from atelier.memory.contract import held_to_contract
from atelier.memory.persona_first import latest_persona, persona_kept
from atelier.memory.registry import BACKENDS, create_backend

SMALL = {"retrieval": {"method": "bm25"}, "hierarchical": {}, "mem0": {}}


def case():
    [found] = [c for c in load_cases("sample", limit=None) if c.id == "q01"]
    return found.view("persona+context")


def every_backend() -> list[str]:
    return sorted(BACKENDS.names())


@pytest.mark.parametrize("backend", every_backend())
@pytest.mark.parametrize("budget", [150, 400, 2000])
async def test_every_backend_keeps_the_persona_whole_and_first_or_says_it_does_not(backend, budget, tmp_path):
    view = case()
    persona = latest_persona(view.history)
    assert persona is not None and len(view.history) > 5
    memory = create_backend(
        {"backend": backend, "budget_tokens": budget, **SMALL.get(backend, {})}, MemoryEnv(store_dir=tmp_path)
    )
    try:
        await memory.ingest(view.user_id, view.history)
        context = await memory.context(view.user_id, memory_query(view))
    finally:
        await memory.aclose()
    said = [d for d in context.degraded if d.kind == "persona_not_kept"]
    if backend in ("none",):
        assert said and not context.text  # gives nothing, and says so
        return
    persona_tokens = count_tokens(persona.render())
    if backend == "persona" and persona_tokens > budget:  # its facets are cut to the budget: said
        assert said and said[0].count >= 1
        return
    assert persona_kept(context.text, persona), (backend, context.text[:300])
    assert not said
    assert context.event_ids[0] == persona.id or backend == "persona"
    if backend != "persona":
        assert persona.id in context.event_ids


class Forgetful(MemoryBackend):
    """A backend of one's own that drops the persona: the episode's recall catches it."""

    name = "forgetful"
    config_model = MemoryConfig

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        self.events = [e for e in events if not isinstance(e, ExplicitPersona)]

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return UserContext(backend=self.name, form="raw", text="\n".join(e.render() for e in self.events[:2]))


def persona_checked(context: UserContext, view) -> UserContext:
    """The memory contract as a run's recall applies it, at a budget no context here exceeds."""
    known = {e.id for e in view.history}
    return held_to_contract(
        context, user_id=view.user_id, budget=10_000, known=known, persona=latest_persona(view.history)
    )


async def test_a_backend_that_loses_the_persona_silently_is_recorded_at_recall():
    view = case()
    memory = Forgetful(MemoryConfig(backend="forgetful"))
    await memory.ingest(view.user_id, view.history)
    context = persona_checked(await memory.context(view.user_id, "q"), view)
    assert [d.kind for d in context.degraded] == ["persona_not_kept"]
    assert "the persona kept whole where the setting gives one" in context.degraded[0].detail
    kept = UserContext(backend="x", form="persona", text=latest_persona(view.history).render())
    assert persona_checked(kept, view).degraded == []
