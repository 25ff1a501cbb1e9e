"""Cases kept once, in the graph's store; graph state carries only their key.

A case with its history, persona and gold runs to tens of kilobytes, and LangGraph writes every
state value into every checkpoint of every (sub)graph step. So episodes keep a `case_key` in
state and read the case from the store (`runtime.store`: the run folder's `store.sqlite` in a run,
the server's store in Studio, a process-wide in-memory store when a graph runs with none). The
key is content-addressed, so a resumed episode reads exactly the case it started with.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from benchmarks.case import Case
from benchmarks.errors import ConfigError
from benchmarks.registry import load_cases

NAMESPACE = ("cases",)

_fallback = InMemoryStore()
_parsed: OrderedDict[str, Case] = OrderedDict()  # validated cases by key (keys are content-addressed)
_PARSED_MAX = 512


def case_key(case: Case) -> str:
    digest = hashlib.sha256(case.model_dump_json().encode()).hexdigest()[:16]
    return f"{case.benchmark}/{case.id}@{digest}"


def store_of(runtime: Any) -> BaseStore:
    """The graph's store, or the process-wide in-memory one when the graph was given none."""
    store = getattr(runtime, "store", None)
    return store if store is not None else _fallback


def _remember(key: str, case: Case) -> Case:
    _parsed[key] = case
    _parsed.move_to_end(key)
    while len(_parsed) > _PARSED_MAX:
        _parsed.popitem(last=False)
    return case


async def put_case(store: BaseStore, case: Case) -> str:
    """Keep `case` in `store` (once: the key names its content) and return its key."""
    key = case_key(case)
    if await store.aget(NAMESPACE, key) is None:
        await store.aput(NAMESPACE, key, case.model_dump(mode="json"), index=False)
    _remember(key, case)
    return key


async def get_case(store: BaseStore, key: str) -> Case:
    if key in _parsed:
        return _parsed[key]
    item = await store.aget(NAMESPACE, key)
    if item is None:
        raise ConfigError(f"case {key} is not in this graph's store (put it there with graphs.case_store.put_case)")
    return _remember(key, Case.model_validate(item.value))


@lru_cache(maxsize=64)
def _benchmark_cases(name: str) -> dict[str, Case]:
    return {c.id: c for c in load_cases(name)}


async def resolve_case(state: Mapping[str, Any], store: BaseStore) -> tuple[str, Case]:
    """The case a graph input names: `case_key` (already in the store), or `benchmark` + `case_id`
    (loaded with the benchmark's defaults and put in the store; handy in Studio)."""
    if state.get("case_key"):
        return state["case_key"], await get_case(store, state["case_key"])
    benchmark, case_id = state.get("benchmark") or "sample", state.get("case_id")
    cases = _benchmark_cases(benchmark)
    if case_id not in cases:
        raise ConfigError(f"no case {case_id!r} in benchmark {benchmark!r} (it has {len(cases)} cases)")
    case = cases[case_id]
    return await put_case(store, case), case


def read_cases(store_path: str | Path) -> dict[str, Case]:
    """Every case in a run folder's `store.sqlite`, by case id (for reports and `atelier trace`)."""
    import sqlite3

    from langgraph.store.sqlite import SqliteStore

    path = Path(store_path)
    if not path.exists():
        return {}
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        items = SqliteStore(conn).search(NAMESPACE, limit=1_000_000)
    items.sort(key=lambda item: item.updated_at)
    return {item.value["id"]: Case.model_validate(item.value) for item in items}
