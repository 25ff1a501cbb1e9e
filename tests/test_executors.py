"""The executor seam without a cluster: recipe and command-line choices, the files a worker copies
back, the cluster limits actor's semantics (in-process), the ledger and web-log capture."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from atelier.agents.models.ledger import Ledger, call_tags, capture_calls
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.execution.executors.limits import ModelLimitsActor
from atelier.runs.execution.executors.ray import _NewFiles, forwarded_env
from atelier.runs.folder.recipe import parse_recipe


def recipe(**run):
    return parse_recipe(
        {
            "name": "t",
            "benchmark": {"name": "tiny"},
            "systems": [{"name": "s", "memory": {"backend": "none"}}],
            "run": run,
        }
    )


def test_local_is_the_default_and_ray_is_chosen_by_recipe_or_command_line():
    assert recipe().run.executor == "local"
    chosen = recipe(executor="ray", ray={"address": "10.0.0.1:6379", "workers": 3})
    assert chosen.run.executor == "ray" and chosen.run.ray.workers == 3
    overridden = recipe().with_overrides(executor="ray", ray_address="127.0.0.2:6380")
    assert overridden.run.executor == "ray" and overridden.run.ray.address == "127.0.0.2:6380"


def test_a_bad_executor_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"run\.executor: must be one of: 'local' or 'ray'"):
        recipe(executor="dask")
    with pytest.raises(ConfigError, match=r"run\.ray\.workers"):
        recipe(executor="ray", ray={"workers": 0})
    with pytest.raises(ConfigError, match=r"cache\.url"):
        parse_recipe(
            {
                "name": "t",
                "benchmark": {"name": "tiny"},
                "systems": [{"name": "s", "memory": {"backend": "none"}}],
                "cache": {"url": "http://not-redis"},
            }
        )


def test_cache_location_prefers_the_shared_url(cache_dir):
    base = {"name": "t", "benchmark": {"name": "tiny"}, "systems": [{"name": "s", "memory": {"backend": "none"}}]}
    assert parse_recipe(base).cache.location == str(cache_dir / "llm")
    assert parse_recipe({**base, "cache": {"url": "redis://h:1/0"}}).cache.location == "redis://h:1/0"
    assert parse_recipe({**base, "cache": {"enabled": False, "url": "redis://h:1/0"}}).cache.location is None


def test_new_files_are_collected_once_and_again_when_changed(tmp_path):
    root = tmp_path / "scratch"
    (root / "judge_artifacts" / "pqr").mkdir(parents=True)
    (root / "memory" / "s").mkdir(parents=True)
    (root / "judge_artifacts" / "pqr" / "a.json").write_text("A")
    (root / "judge_artifacts" / "pqr" / ".a.json.123.tmp").write_text("half")
    (root / "memory" / "s" / "chroma.sqlite3").write_text("store")
    (root / "ledger.jsonl").write_text("{}\n")
    files = _NewFiles(root)
    assert files.collect() == {"judge_artifacts/pqr/a.json": b"A"}
    assert files.collect() == {}
    (root / "web" / "records" / "ab").mkdir(parents=True)
    (root / "web" / "records" / "ab" / "abc.json").write_text("R")
    (root / "judge_artifacts" / "pqr" / "a.json").write_text("A2")
    assert files.collect() == {"web/records/ab/abc.json": b"R", "judge_artifacts/pqr/a.json": b"A2"}


def test_forwarded_env_names_only_what_is_set(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-1")
    monkeypatch.delenv("OTHER_KEY", raising=False)
    env = forwarded_env(["MY_KEY", "OTHER_KEY", None])
    assert (
        env["MY_KEY"] == "sk-1"
        and "OTHER_KEY" not in env
        and env["ATELIER_CACHE_DIR"] == os.environ["ATELIER_CACHE_DIR"]
    )


async def test_limits_actor_never_grants_more_than_the_bound_and_forgets_abandoned_waits():
    limits = ModelLimitsActor()
    held, peak = 0, 0

    async def call(i: int) -> None:
        nonlocal held, peak
        assert await limits.acquire("m", 2, f"lease{i}", "node")
        held += 1
        peak = max(peak, held)
        await asyncio.sleep(0.01)
        held -= 1
        await limits.release("m", 2, f"lease{i}")

    await asyncio.gather(*(call(i) for i in range(10)))
    stats = await limits.stats()
    assert peak == 2 and stats["m#2"] == {"held": 0, "peak": 2, "granted": 10}
    # a waiter that gave up (released before granted) is never granted later
    assert await limits.acquire("m", 1, "first", "node")
    waiting = asyncio.create_task(limits.acquire("m", 1, "gave-up", "node"))
    await asyncio.sleep(0.01)
    await limits.release("m", 1, "gave-up")
    assert await waiting is False
    await limits.release("m", 1, "first")
    assert (await limits.stats())["m#1"]["held"] == 0


async def test_limits_actor_rate_bucket_spaces_calls():
    """As the gateway paces a model: a burst of two, then one call per 60/rpm s (0.1 s at 600 rpm);
    another model has a bucket of its own."""
    limits = ModelLimitsActor()
    started = time.perf_counter()
    granted: list[float] = []

    async def call(model: str) -> None:
        await limits.wait_rate(model, 600)
        granted.append(time.perf_counter() - started)

    await asyncio.gather(*(call("m") for _ in range(7)))
    assert max(granted[:2]) < 0.05  # the burst
    assert granted[-1] >= 5 * 0.1 - 0.02  # five more, 0.1 s apart
    gaps = [b - a for a, b in zip(granted[1:], granted[2:], strict=False)]
    assert min(gaps) >= 0.1 - 0.02, gaps
    other = time.perf_counter()
    await limits.wait_rate("other", 600)
    assert time.perf_counter() - other < 0.05


async def test_ledger_capture_collects_an_episodes_calls_tasks_included(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="r")

    async def one_call(role: str) -> None:
        ledger.record(role=role, model="m", call_id=role)

    with call_tags(case="c1", system="s"), capture_calls() as calls:
        await asyncio.gather(one_call("a"), one_call("b"))
    ledger.record(role="outside", model="m", call_id="x")
    assert sorted(e.role for e in calls) == ["a", "b"] and all(e.case_id == "c1" for e in calls)
    elsewhere = Ledger(tmp_path / "driver.jsonl", run_id="r")
    elsewhere.append(calls)
    assert (tmp_path / "driver.jsonl").read_text().count("\n") == 2


def test_workers_structured_modes_merge_into_the_run_folder_latest_first(tmp_path):
    import json

    from atelier.runs.execution.executors.ray import _merge_modes

    path = tmp_path / "structured_modes.json"
    _merge_modes(path, json.dumps({"a@x": {"mode": "json_schema", "learned_at": "2026-01-01T00:00:02+00:00"}}).encode())
    _merge_modes(
        path,
        json.dumps(
            {
                "a@x": {"mode": "tools", "learned_at": "2026-01-01T00:00:01+00:00"},
                "b@y": {"mode": "json_object", "learned_at": "2026-01-01T00:00:01+00:00"},
            }
        ).encode(),
    )
    _merge_modes(path, b"not json")
    assert json.loads(path.read_text()) == {
        "a@x": {"mode": "json_schema", "learned_at": "2026-01-01T00:00:02+00:00"},  # an older copy does not win
        "b@y": {"mode": "json_object", "learned_at": "2026-01-01T00:00:01+00:00"},
    }
