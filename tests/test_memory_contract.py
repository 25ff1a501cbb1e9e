"""What every memory backend keeps beyond the conformance kit: an empty history gives an empty
context, unicode survives, the state digest follows what is ingested. The protocol's contract itself
— idempotent ingest, isolated concurrent users, the budget, real event ids, no gold read, the state
rebuilt after a kill, the persona — is the kit's (`atelier check memory`), which
tests/test_conformance.py runs on every registered backend."""

from __future__ import annotations

import asyncio

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.case import ExplicitPersona, MemorySnippet
from atelier.memory.base import MemoryEnv
from atelier.memory.registry import backend_names, create_backend
from atelier.runs.studies.conformance.memory import history  # the kit's synthetic history: one copy

USERS = {"alice": "ALICEWORD", "bob": "BOBWORD"}


@pytest.fixture(params=backend_names())
async def backend(request, tmp_path):
    gateway = Gateway({"system": ModelSettings(), "memory": ModelSettings()})
    instance = create_backend({"backend": request.param}, MemoryEnv(gateway=gateway, store_dir=tmp_path / "store"))
    yield instance
    await instance.aclose()


async def ingest_all(backend) -> None:
    await asyncio.gather(*(backend.ingest(user, history(user, marker)) for user, marker in USERS.items()))


async def test_empty_history_gives_an_empty_context(backend):
    ctx = await backend.context("nobody", "what should I cook tonight?", 500)
    assert ctx.event_ids == []
    await backend.ingest("empty", [])
    assert (await backend.context("empty", "anything", 500)).event_ids == []


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
