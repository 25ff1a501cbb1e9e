"""The run's progress (issue 53): the time left at the pace so far, the tokens and dollars the run's
calls spent so far with what is left of a budget, and — while a model, a memory or the web starts —
what the run is waiting for, said on the bar instead of a silent 0/N."""

from __future__ import annotations

import asyncio
import threading

import pytest

from atelier.agents.models.ledger import Ledger
from atelier.benchmarks.common.waiting import Waits, waiting_for, watching
from atelier.runs.execution.budget import Budget
from atelier.runs.execution.runner import EpisodeProgress


def test_the_time_left_is_the_pace_so_far_and_unknown_before_an_episode_ends():
    bar = EpisodeProgress(False, total=10, done=2)
    bar.started = 100.0
    assert bar.eta(now=130.0) == "time left: ? (no episode done yet)"
    bar.advance(True)
    bar.advance(False)  # a failure counts as done too
    # 2 episodes in 60 s this session (the 2 of an earlier session set no pace), 6 to go: 180 s
    assert bar.eta(now=160.0) == "about 0:03:00 left"
    assert bar.eta(now=220.0) == "about 0:06:00 left"  # slower since: the estimate follows
    for _ in range(6):
        bar.advance(True)
    assert bar.eta(now=300.0) == "done"


def test_the_spend_so_far_comes_from_the_runs_ledger_with_the_budget_left():
    ledger = Ledger(None, run_id="r")
    budget = Budget(limit_usd=5.0, planned_usd={"s": 0.5})
    bar = EpisodeProgress(False, total=4, done=0, ledger=ledger, budget=budget)
    assert bar.spend_line() == "0 tokens, $0 spent so far; budget $5: $5 left"
    ledger.record(role="system", model="m", call_id="a", prompt_tokens=1000, completion_tokens=234, cost_usd=0.0123)
    ledger.record(role="judge", model="m", call_id="b", prompt_tokens=500, completion_tokens=5, cache_hit=True)
    ledger.record(role="system", model="m", call_id="c", status="error")
    budget.spent_now = 0.0123
    assert bar.spend_line() == (
        "1,234 tokens, $0.0123 spent so far (3 calls, 1 from the response cache); budget $5: $4.988 left"
    )
    ledger.record(role="system", model="x", call_id="d", prompt_tokens=10, completion_tokens=1, cost_usd=None)
    assert "$0.0123 + 1 unpriced call spent so far" in bar.spend_line()  # an unknown price is never $0


def test_what_the_run_waits_for_is_said_with_how_long_and_goes_when_done():
    waits = Waits()
    bar = EpisodeProgress(False, total=1, done=0, ledger=Ledger(None), waits=waits)
    assert bar.notes() == ["0 tokens, $0 spent so far"]
    started, release = threading.Event(), threading.Event()

    def load() -> None:
        with waiting_for("the local model smollm2 to load"):
            started.set()
            release.wait(10)

    with watching(waits):  # a thread started by the run's code inherits nothing: asyncio.to_thread copies it
        worker = asyncio.run(_in_thread(load, started))
    assert bar.notes()[-1] == "waiting for the local model smollm2 to load (0 s)"
    release.set()
    worker.join(10)
    assert bar.notes() == ["0 tokens, $0 spent so far"]
    with waiting_for("nothing: no run watches"):  # outside a run: a no-op
        assert waits.now() is None


async def _in_thread(target, started: threading.Event) -> threading.Thread:
    """Start `target` in a thread with this context (as asyncio.to_thread does) and wait until it began."""
    import contextvars

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(target,))
    thread.start()
    await asyncio.to_thread(started.wait, 10)
    return thread


def test_opening_a_memory_is_said_while_it_takes(monkeypatch, tmp_path):
    from atelier.graphs import resources
    from atelier.graphs.context import EpisodeContext, SystemSpec
    from atelier.memory.registry import create_backend

    opened, release = threading.Event(), threading.Event()

    def slow_backend(config, env):
        opened.set()
        release.wait(10)
        return create_backend({"backend": "none"}, env)

    monkeypatch.setattr(resources, "create_backend", slow_backend)
    context = EpisodeContext(run_id="progress-test", system=SystemSpec(name="rag-mem0", memory={"backend": "mem0"}))
    waits = Waits()

    async def open_it() -> None:
        with watching(waits):
            task = asyncio.create_task(resources.resources_for(context).open_memory())
            await asyncio.to_thread(opened.wait, 10)
            seen.append(waits.now())
            release.set()
            await task

    seen: list[str | None] = []
    asyncio.run(open_it())
    assert seen[0].startswith("the mem0 memory of rag-mem0 to open (its store, its embedder) (")
    assert waits.now() is None
    asyncio.run(resources.release(context))


def test_the_bar_shows_the_spend_and_the_wait_below_it(capsys):
    waits = Waits()
    ledger = Ledger(None)
    ledger.record(role="system", model="m", call_id="a", prompt_tokens=40, completion_tokens=2, cost_usd=0.5)
    with watching(waits), waits.waiting("the web to start (a sandbox indexes its corpus)"):
        with EpisodeProgress(True, total=3, done=0, ledger=ledger, waits=waits) as bar:
            bar._bar.refresh()
    text = " ".join(capsys.readouterr().out.split())
    assert "0/3" in text and "time left: ? (no episode done yet)" in text
    assert "42 tokens, $0.5 spent so far (1 call, 0 from the response cache)" in text
    assert "waiting for the web to start (a sandbox indexes its corpus) (0 s)" in text


@pytest.mark.parametrize("total", [1, 3])
def test_a_run_ends_with_its_bar_complete(tmp_path, cache_dir, total, capsys):
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    recipe = parse_recipe(
        {
            "name": "bar",
            "benchmark": {"name": "tiny", "limit": total},
            "systems": [{"name": "none", "memory": {"backend": "none"}}],
            "run": {"out_dir": str(tmp_path)},
        }
    )
    run_recipe(recipe, tmp_path / "run", progress=True)
    out = capsys.readouterr().out
    assert f"{total}/{total}" in out and "spent so far" in out and "done" in out
