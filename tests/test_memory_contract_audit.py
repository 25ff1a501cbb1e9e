"""Audit D2, D10, D12: a memory's context is held to its whole schema, and its protocol methods must
be `async def`.

- D2: a context made valid, then a field set wrongly (tokens="many", degraded="x", form="bogus",
  a share made with `model_construct`, ...) fails the episode by the clause 'contexts in the
  UserContext schema' (`memory_bad_context`) — it crashed the run (exit 1, "a bug") — breaks the
  kit's clause, and stops `memory eval` (exit 2) rather than being scored;
- D12: a context's tokens are never negative (it was recorded, exit 0);
- D10: a backend whose `context()` or `ingest()` is a plain `def` is refused where it is loaded
  (exit 2, naming the backend and the method) — a bare TypeError failed every episode.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.plugins import PluginKindError
from atelier.memory import contract as memory_contract
from atelier.memory.base import ContextShare, MemoryBackend, MemoryConfig, MemoryQuery, UserContext
from atelier.memory.budget import pack_events
from atelier.memory.registry import BACKENDS, backend_names
from atelier.runs.execution.runner import Runner
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from atelier.runs.reading.outcome import EXIT_FAILURES
from tests.test_cli_errors import atelier

HERE = "tests.test_memory_contract_audit"
CLAUSE = memory_contract.CONTEXT.name


class FieldSetConfig(MemoryConfig):
    field: str = "tokens"
    value: str = '"many"'  # JSON


class _Held(MemoryBackend):
    config_model = MemoryConfig

    def __init__(self, config: MemoryConfig, env: Any = None) -> None:
        super().__init__(config, env)
        self.events: dict[str, dict[str, HistoryEvent]] = {}

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        held = self.events.setdefault(user_id, {})
        for event in events:
            held.setdefault(event.id, event)

    def valid(self, user_id: str, budget: int | None, **fields: Any) -> UserContext:
        packed = pack_events(list(self.events.get(user_id, {}).values()), self.budget(budget))
        made = {"text": packed.text, "event_ids": packed.ids, "tokens": packed.tokens, **fields}
        return UserContext(backend=self.name, form="raw", **made)


class FieldSetMemory(_Held):
    """A valid context, then one field set wrongly (pydantic does not validate assignment)."""

    config_model = FieldSetConfig

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        context = self.valid(user_id, budget)
        setattr(context, self.config.field, json.loads(self.config.value))
        return context


class NegativeTokensMemory(_Held):
    """Makes its context with tokens=-500 (the constructor refuses it)."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return self.valid(user_id, budget, tokens=-500)


class RepeatedIdMemory(_Held):
    """A valid context whose event_ids name its first event twice (memory eval would rank it last)."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        context = self.valid(user_id, budget)
        return context.model_copy(update={"event_ids": [*context.event_ids, *context.event_ids[:1]]})


class SyncContextMemory(_Held):
    def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:  # type: ignore[override]
        return self.valid(user_id, budget)


class SyncIngestMemory(_Held):
    def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:  # type: ignore[override]
        self.events.setdefault(user_id, {}).update({e.id: e for e in events})

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        return self.valid(user_id, budget)


BAD_FIELDS: dict[str, tuple[Any, str]] = {  # name: (the value set, as the problem shows it)
    "tokens": ("many", "'many'"),
    "tokens_none": (None, "None"),
    "tokens_negative": (-500, "-500"),
    "degraded": ("x", "'x'"),
    "backend": (None, "None"),
    "form": ("bogus", "'bogus'"),
    "share": (
        ContextShare.model_construct(
            budget_tokens=-1, events_offered=1, events_kept=1, tokens_offered=math.nan, tokens_kept=1
        ),
        "nan",
    ),
}


def made(name: str) -> UserContext:
    field = name.split("_")[0]
    context = UserContext(backend="mine", form="raw", text="hello", event_ids=["e1"], tokens=1)
    setattr(context, field, BAD_FIELDS[name][0])
    return context


# --------------------------------------------------------------------------- the check itself


@pytest.mark.parametrize("name", sorted(BAD_FIELDS))
def test_a_field_set_wrongly_after_the_context_was_made_is_named_with_its_value(name):
    problem = memory_contract.context_problem(made(name), "mine")
    assert problem is not None, name
    field = "share.tokens_offered" if name == "share" else name.split("_")[0]
    assert "the mine memory's context" in problem and repr(field) in problem and BAD_FIELDS[name][1] in problem
    with pytest.raises(ContractBroken) as broken:
        memory_contract.checked_context(made(name), "mine")
    assert broken.value.clause is memory_contract.CONTEXT and CLAUSE in str(broken.value)


@pytest.mark.parametrize("ids", [["e1", "e1"], ["e1", "e2", "e3", "e2"]])
def test_an_event_named_twice_in_event_ids_is_named(ids):
    problem = memory_contract.context_problem(UserContext(backend="mine", event_ids=ids), "mine")
    assert problem is not None and f"names the event {ids[-1]!r} twice" in problem
    assert memory_contract.context_problem(UserContext(backend="mine", event_ids=sorted(set(ids))), "mine") is None


def test_a_valid_context_and_a_subclass_of_usercontext_pass():
    class Richer(UserContext):
        note: str = ""

    share = ContextShare(budget_tokens=10, events_offered=1, events_kept=1, tokens_offered=3, tokens_kept=3)
    assert memory_contract.context_problem(UserContext(backend="b", share=share, scores={"e": math.nan}), "b") is None
    assert memory_contract.context_problem(Richer(backend="b", note="kept"), "b") is None
    bad = Richer(backend="b")
    bad.note = 3  # type: ignore[assignment]
    assert "'note'" in (memory_contract.context_problem(bad, "b") or "")


def test_tokens_are_never_negative():
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        UserContext(backend="b", tokens=-500)
    assert UserContext(backend="b", tokens=0).tokens == 0


# --------------------------------------------------------------------------- loading: async methods


def test_the_builtins_await_what_the_protocol_awaits():
    from atelier.memory.registry import not_async

    assert {name: not_async(BACKENDS.get(name)) for name in backend_names()} == {name: [] for name in backend_names()}


@pytest.mark.parametrize(("double", "method"), [("SyncContextMemory", "context"), ("SyncIngestMemory", "ingest")])
def test_a_plain_def_protocol_method_is_refused_where_the_backend_is_loaded(double, method, tmp_path):
    with pytest.raises(PluginKindError) as refused:
        BACKENDS.get(f"{HERE}:{double}")
    said = str(refused.value)
    assert f"{HERE}:{double}" in said and f"{double}.{method}()" in said and "async def" in said
    with pytest.raises(ConfigError, match=rf"{double}\.{method}\(\) is a plain `def`"):
        recipe(tmp_path, {"backend": f"{HERE}:{double}"})


# --------------------------------------------------------------------------- a run, memory eval, the kit


def recipe(tmp_path: Path, memory: dict):
    return parse_recipe(
        {
            "name": "audit",
            "benchmark": {"name": "tiny", "setting": "context", "limit": 2},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [{"name": "mine", "pipeline": "direct", "memory": memory}],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


@pytest.mark.parametrize(
    "memory",
    [
        {"backend": f"{HERE}:FieldSetMemory"},
        {"backend": f"{HERE}:FieldSetMemory", "field": "form", "value": '"bogus"'},
        {"backend": f"{HERE}:NegativeTokensMemory"},
        {"backend": f"{HERE}:RepeatedIdMemory"},
    ],
    ids=["tokens", "form", "negative", "repeated-id"],
)
def test_a_run_fails_the_episode_by_the_clause(tmp_path, memory):
    runner = Runner(recipe(tmp_path, memory), tmp_path / "run", progress=False)
    asyncio.run(runner.run())
    assert runner.outcome is not None and runner.outcome.exit_code == EXIT_FAILURES
    records = list(ResultsFile(runner.folder.results).load().values())
    assert records and all(not r.ok and CLAUSE in (r.error or "") for r in records)
    kinds = [d.kind for r in records for d in r.degraded]
    assert kinds.count("memory_bad_context") == len(records)


@pytest.mark.parametrize(
    ("backend", "params", "said"),
    [
        ("FieldSetMemory", [], "field 'tokens' invalid"),
        ("FieldSetMemory", ["--param", "field=degraded", "--param", 'value="\\"x\\""'], "field 'degraded' invalid"),
        ("NegativeTokensMemory", [], "greater than or equal to 0 (got -500)"),
        ("SyncContextMemory", [], "SyncContextMemory.context() is a plain `def`"),
    ],
)
def test_memory_eval_stops_on_a_broken_context_with_exit_2(capsys, monkeypatch, backend, params, said):
    code, out, err = atelier(
        capsys, monkeypatch, "memory", "eval", "--benchmark", "sample", "--backend", f"{HERE}:{backend}", *params
    )
    assert code == 2, err
    assert said in err and "a bug" not in err and "nDCG" not in out
    if backend != "SyncContextMemory":
        assert CLAUSE in err


@pytest.mark.parametrize("backend", ["FieldSetMemory", "NegativeTokensMemory"])
async def test_the_kit_breaks_the_schema_clause(tmp_path, backend):
    from atelier.runs.studies.conformance.memory import MemoryKit

    kit = MemoryKit(f"{HERE}:{backend}", {}, tmp_path)
    try:
        with pytest.raises(ContractBroken):
            await kit.idempotent([], {})
    finally:
        await kit.close()
    clause = kit.context_schema()
    assert clause.verdict == "broken" and "field 'tokens'" in clause.evidence, clause
