"""The contract every memory backend keeps: ingest, recall, budget, real ids, isolation, empty history,
unicode, idempotent ingest, concurrency. Runs every registered backend on the scripted model."""

from __future__ import annotations

import asyncio

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.case import (
    ChatMessage,
    ChatSession,
    ExplicitPersona,
    MemorySnippet,
    PTKBStatement,
    SearchQueryRecord,
    SearchSession,
)
from atelier.memory.base import MemoryEnv, MemoryQuery
from atelier.memory.budget import count_tokens
from atelier.memory.registry import backend_names, create_backend


def history(user: str, marker: str) -> list:
    """A user's history; every text carries the user's marker word so leaks are visible."""
    return [
        MemorySnippet(id=f"{user}:m1", text=f"{marker} I am vegetarian and allergic to soy.", timestamp="2025-01-03"),
        MemorySnippet(id=f"{user}:m2", text=f"{marker} I run a half marathon every spring.", timestamp="2025-02-10"),
        MemorySnippet(
            id=f"{user}:m3", text=f"{marker} My budget for travel is tight this year.", timestamp="2025-03-01"
        ),
        PTKBStatement(id=f"{user}:p1", text=f"{marker} I live in Lisbon with my two cats."),
        ChatSession(
            id=f"{user}:c1",
            timestamp="2025-03-05",
            messages=[
                ChatMessage(role="user", content=f"{marker} Explain index funds to me simply, please."),
                ChatMessage(role="assistant", content="An index fund tracks a market index at low cost."),
            ],
        ),
        SearchSession(
            id=f"{user}:s1",
            timestamp="2025-03-09",
            queries=[
                SearchQueryRecord(query=f"{marker} cheap vegetarian restaurants lisbon"),
            ],
        ),
        MemorySnippet(
            id=f"{user}:m4", text=f"{marker} 我喜欢喝乌龙茶 🍵 — und lese gern Krimis.", timestamp="2025-03-12"
        ),
    ]


USERS = {"alice": "ALICEWORD", "bob": "BOBWORD"}


@pytest.fixture(params=backend_names())
async def backend(request, tmp_path):
    gateway = Gateway({"system": ModelSettings(), "memory": ModelSettings()})
    instance = create_backend({"backend": request.param}, MemoryEnv(gateway=gateway, store_dir=tmp_path / "store"))
    yield instance
    await instance.aclose()


async def ingest_all(backend) -> None:
    await asyncio.gather(*(backend.ingest(user, history(user, marker)) for user, marker in USERS.items()))


async def test_recall_returns_real_ids_within_budget(backend):
    await ingest_all(backend)
    for user in USERS:
        for budget in (40, 400):
            ctx = await backend.context(user, MemoryQuery(text="Suggest a vegetarian dinner plan for a runner"), budget)
            assert ctx.backend == backend.name
            assert count_tokens(ctx.text) <= budget
            assert ctx.tokens == count_tokens(ctx.text) or ctx.form == "none"
            assert set(ctx.event_ids) <= {e.id for e in history(user, USERS[user])}
            assert len(ctx.event_ids) == len(set(ctx.event_ids))
            if ctx.form == "none":
                assert ctx.text == "" and ctx.event_ids == []


async def test_one_users_memory_never_reaches_another(backend):
    await ingest_all(backend)
    for user in USERS:
        other = next(m for u, m in USERS.items() if u != user)
        ctx = await backend.context(user, "vegetarian soy marathon budget Lisbon cats index funds tea", 2000)
        assert other not in ctx.text
        assert not any(i.startswith(f"{u}:") for i in ctx.event_ids for u in USERS if u != user)


async def test_empty_history_gives_an_empty_context(backend):
    ctx = await backend.context("nobody", "what should I cook tonight?", 500)
    assert ctx.event_ids == []
    await backend.ingest("empty", [])
    assert (await backend.context("empty", "anything", 500)).event_ids == []


async def test_ingest_is_idempotent(backend):
    await ingest_all(backend)
    await backend.ingest("alice", history("alice", USERS["alice"]))
    ctx = await backend.context("alice", "vegetarian", 4000)
    assert len(ctx.event_ids) == len(set(ctx.event_ids))


async def test_unicode_survives(backend):
    await backend.ingest("zoe", [MemorySnippet(id="zoe:u1", text="我喜欢喝乌龙茶 🍵 — und lese gern Krimis; שלום")])
    ctx = await backend.context("zoe", "乌龙茶", 500)
    if ctx.form == "raw":
        assert "乌龙茶 🍵" in ctx.text and "שלום" in ctx.text
    assert set(ctx.event_ids) <= {"zoe:u1"}


async def test_the_state_digest_says_what_the_memory_holds(backend):
    """What a resumed run checks a rebuilt memory against (memory/journal.py): it changes with what
    is ingested, not with ingesting it again, and it is one user's."""
    empty = await backend.state_digest("alice")
    await ingest_all(backend)
    held = await backend.state_digest("alice")
    await backend.ingest("alice", history("alice", USERS["alice"]))
    assert await backend.state_digest("alice") == held
    if backend.name == "none":
        assert held == empty  # it keeps nothing
        return
    if backend.name == "persona":  # it keeps persona events only
        assert held == empty
        await backend.ingest(
            "alice", [ExplicitPersona(id="alice:persona", attributes={"Basic Attributes": {"Age": "34"}})]
        )
        assert await backend.state_digest("alice") != held
        return
    assert held != empty and held != await backend.state_digest("bob")
    await backend.ingest("alice", [MemorySnippet(id="alice:m9", text="ALICEWORD I moved to Porto.")])
    assert await backend.state_digest("alice") != held
