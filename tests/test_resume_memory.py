"""Resume never changes a result: a process that resumes a run gets every memory backend's state
back exactly (memory/journal.py), Ctrl-C leaves no false failure behind, and names that become
folders of the run folder cannot lead out of it.

The backends' state is compared through `state_digest` (everything a backend holds about a user:
events, profiles, facets, tiers with heat counters and times, mem0's memories), so "equal" means
equal, not merely non-empty. The end-to-end test kills real runs (`kill -9`) at three steps and
compares each resumed run with an uninterrupted one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.case import ChatMessage, ChatSession, MemorySnippet, PTKBStatement
from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.inputs import GraphInputError
from atelier.graphs.resources import release, resources_for, run_path
from atelier.memory.base import MemoryEnv, MemoryQuery
from atelier.memory.journal import JOURNAL_FILE, JournaledMemory, MemoryRebuildError, journaled
from atelier.memory.registry import backend_names, create_backend
from atelier.runs.folder.recipe import parse_recipe
from tests.openai_stub import OpenAIStub

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- two processes of one run

# options that make the backends' state depend on order: hierarchical evicts and promotes within a
# few events; the others keep their defaults
OPTIONS: dict[str, dict[str, Any]] = {
    "hierarchical": {"short_term_capacity": 2, "promotion_heat": 2.5},
    "profile": {"chunk_tokens": 200},
}


def history(user: str, n: int) -> list:
    events = [
        MemorySnippet(id=f"{user}:m1", text="I am vegetarian and allergic to soy.", timestamp="2025-01-03"),
        MemorySnippet(
            id=f"{user}:m2", text="I run a half marathon every spring, mostly on trails.", timestamp="2025-02-10"
        ),
        PTKBStatement(id=f"{user}:p1", text="I live in Lisbon with my two cats and a small balcony garden."),
        ChatSession(
            id=f"{user}:c1",
            timestamp="2025-03-05",
            messages=[
                ChatMessage(role="user", content="Explain index funds to me simply, with one example please."),
                ChatMessage(role="assistant", content="An index fund tracks a market index at low cost."),
            ],
        ),
        MemorySnippet(
            id=f"{user}:m3", text="My travel budget is tight this year; I prefer trains.", timestamp="2025-03-09"
        ),
        MemorySnippet(
            id=f"{user}:m4", text="我喜欢喝乌龙茶 — und lese gern Krimis am Wochenende.", timestamp="2025-03-12"
        ),
    ]
    return events[:n]


def gateway(cache: Path, ledger: Ledger) -> Gateway:
    return Gateway({"system": ModelSettings(), "memory": ModelSettings()}, cache=ResponseCache(cache), ledger=ledger)


def open_backend(name: str, store: Path, cache: Path, ledger: Ledger | None = None, **options):
    """The backend as a run's process opens it (graphs/resources.py): journaled in its store."""
    env = MemoryEnv(gateway=gateway(cache, ledger or Ledger(None)), store_dir=store)
    return journaled(create_backend({"backend": name, **OPTIONS.get(name, {}), **options}, env))


async def first_process(memory) -> dict[str, Any]:
    """Two episodes' worth of work on u1 (the second brings three more events: an incremental
    update), one recall in between, and u2; then what the memory holds."""
    await memory.ingest("u1", history("u1", 3))
    await memory.context("u1", MemoryQuery(text="Plan my meals for a training week."))
    await memory.ingest("u1", history("u1", 6))
    await memory.context("u1", "Which running shoes should I buy?")
    await memory.ingest("u2", history("u2", 2))
    return {user: await memory.state_digest(user) for user in ("u1", "u2")}


LLM_MADE = {"profile", "persona_model", "hierarchical", "mem0"}  # memories an LLM builds at ingest


# the slowest backends to rebuild (a quarter minute each) in the battery
SLOW_TO_REBUILD = {"hierarchical", "mem0", "persona_model"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.battery) if n in SLOW_TO_REBUILD else n for n in backend_names()]
)
async def test_a_later_process_gets_the_state_back_exactly_with_no_model_call(name, tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend(name, store, cache)
    await first_process(memory)
    query = MemoryQuery(text="Where should I travel this spring?")
    asked_before = await memory.context("u1", query)
    held = {user: await memory.state_digest(user) for user in ("u1", "u2")}
    await memory.aclose()

    ledger = Ledger(None)
    later = open_backend(name, store, cache, ledger)
    assert {user: await later.state_digest(user) for user in ("u1", "u2")} == held
    await later.ingest("u1", history("u1", 6))  # what the resumed episode's own ingest does: nothing new
    assert await later.state_digest("u1") == held["u1"]
    assert await later.context("u1", query) == asked_before
    assert [e for e in ledger.entries if not e.cache_hit] == []  # every rebuild call answered by the cache
    assert {e.node for e in ledger.entries} == ({"memory_rebuild"} if name in LLM_MADE else set()) | (
        {"recall"} if name in ("query_profile", "selected") else set()
    )
    if isinstance(later, JournaledMemory):  # ingests, and recalls that change state (hierarchical heat)
        assert later.replayed == {"u1": 5 if later.recall_changes_state else 2, "u2": 1}
    await later.aclose()
    if name not in ("none", "persona"):  # (no persona event in this history)
        assert held["u1"] != held["u2"]


async def test_an_incremental_profile_is_rebuilt_as_it_grew_not_as_one_batch(tmp_path):
    """The journal replays the ingests as they came: one batch of all six events makes another profile."""
    memory = open_backend("profile", tmp_path / "store", tmp_path / "cache")
    held = await first_process(memory)
    await memory.aclose()
    at_once = create_backend(
        {"backend": "profile", **OPTIONS["profile"]}, MemoryEnv(gateway=gateway(tmp_path / "cache", Ledger(None)))
    )
    await at_once.ingest("u1", history("u1", 6))
    assert await at_once.state_digest("u1") != held["u1"]
    later = open_backend("profile", tmp_path / "store", tmp_path / "cache")
    assert await later.state_digest("u1") == held["u1"]
    await later.aclose()


async def test_hierarchical_heat_from_searches_is_rebuilt_and_a_repeated_task_does_not_search_twice(
    tmp_path, monkeypatch
):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("hierarchical", store, cache)
    await memory.ingest("u1", history("u1", 6))
    heat_before = [s.visits for s in memory.tiers("u1").mid_term.sessions.values()]
    monkeypatch.setattr("atelier.memory.journal.graph_task", lambda: "q1::sys|recall:task-1")
    asked = await memory.context("u1", "Which running shoes should I buy?")
    after_one = await memory.state_digest("u1")
    heat_after = [s.visits for s in memory.tiers("u1").mid_term.sessions.values()]
    assert sum(heat_after) > sum(heat_before)  # the search visited sessions
    assert await memory.context("u1", "Which running shoes should I buy?") == asked
    assert await memory.state_digest("u1") == after_one  # the same task again: no second visit
    await memory.aclose()

    later = open_backend("hierarchical", store, cache)
    assert await later.state_digest("u1") == after_one  # heat, visit times and all
    assert [s.visits for s in later.tiers("u1").mid_term.sessions.values()] == heat_after
    assert await later.context("u1", "Which running shoes should I buy?") == asked  # the task resumed after a kill
    assert await later.state_digest("u1") == after_one
    await later.aclose()
    lines = (store / JOURNAL_FILE).read_text().splitlines()
    assert [json.loads(line)["op"] for line in lines] == ["backend", "ingest", "recall"]


async def test_a_graph_step_is_named_alike_when_a_new_process_redoes_it(tmp_path):
    """A recall redone after a kill runs under a new checkpoint id, hence a new task id: the step's
    name (thread, node path, step number) must not depend on it."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    from atelier.memory.journal import graph_task

    class State(TypedDict, total=False):
        seen: str

    def named(state: State) -> State:
        return {"seen": graph_task()}

    def build():
        graph = StateGraph(State)
        graph.add_node("prepare", lambda state: {"seen": ""})
        graph.add_node("recall", named)
        graph.add_edge(START, "prepare")
        graph.add_edge("prepare", "recall")
        return graph.compile(checkpointer=InMemorySaver())

    config = {"configurable": {"thread_id": "q1::hierarchical"}}
    first, again = (await build().ainvoke({}, config))["seen"], (await build().ainvoke({}, config))["seen"]
    assert first == again == "q1::hierarchical|recall|2"
    assert graph_task() is None  # outside a graph


def test_a_clock_tape_gives_back_its_readings_then_says_it_ran_out():
    from atelier.memory.clock import ClockTape, on_tape, read_clock

    ticks = iter([10.0, 20.0, 30.0])
    recording = ClockTape()
    with on_tape(recording):
        assert [read_clock(lambda: next(ticks)) for _ in range(2)] == [10.0, 20.0]
    replay = ClockTape(recording.readings)
    with on_tape(replay):
        assert [read_clock(lambda: 99.0) for _ in range(3)] == [10.0, 20.0, 99.0]
    assert replay.overrun and not recording.overrun
    assert read_clock(lambda: 5.0) == 5.0  # no tape: the clock itself


async def test_mem0_rebuilt_on_another_day_asks_the_same_requests(tmp_path):
    """mem0 writes the day into its extraction prompt: replayed adds keep their first day, so the
    cache answers them; an add on the later day is another request."""
    store, cache = tmp_path / "store", tmp_path / "cache"
    first_day = datetime(2025, 5, 1, 12, tzinfo=UTC).timestamp()
    later_day = first_day + timedelta(days=3).total_seconds()
    memory = open_backend("mem0", store, cache)
    memory.inner.clock = lambda: first_day
    await memory.ingest("u1", history("u1", 3))
    held = await memory.state_digest("u1")
    await memory.aclose()

    ledger = Ledger(None)
    later = open_backend("mem0", store, cache, ledger)
    later.inner.clock = lambda: later_day
    assert await later.state_digest("u1") == held
    assert ledger.entries and all(e.cache_hit for e in ledger.entries)
    await later.aclose()

    ledger = Ledger(None)
    fresh = create_backend({"backend": "mem0"}, MemoryEnv(gateway=gateway(cache, ledger)))
    fresh.clock = lambda: later_day
    await fresh.ingest("u1", history("u1", 1))
    assert not ledger.entries[0].cache_hit  # the same add on another day: the date made it another request
    await fresh.aclose()


async def test_mem0_memories_a_killed_process_left_unjournaled_are_dropped(tmp_path):
    """An add that reached mem0's store but not the journal (killed in between) is not reopened: the
    resumed episode adds it again, onto the state the journal rebuilt."""
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("mem0", store, cache)
    await memory.ingest("u1", history("u1", 2))
    held = await memory.state_digest("u1")
    await memory.inner.ingest("u1", history("u1", 4))  # past the journal: what a kill leaves half-recorded
    assert await memory.inner.state_digest("u1") != held
    await memory.aclose()

    later = open_backend("mem0", store, cache)
    assert await later.state_digest("u1") == held
    await later.aclose()


async def test_a_torn_last_line_is_cut_and_what_came_before_is_rebuilt(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("profile", store, cache)
    await memory.ingest("u1", history("u1", 3))
    held = await memory.state_digest("u1")
    await memory.aclose()
    journal = store / JOURNAL_FILE
    whole = journal.read_text()
    journal.write_text(whole + '{"op": "ingest", "user_id": "u1", "ev')  # killed while writing

    later = open_backend("profile", store, cache)
    assert await later.state_digest("u1") == held
    await later.aclose()
    assert journal.read_text() == whole


async def test_a_rebuild_that_differs_is_refused_and_stays_refused(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("persona_model", store, cache)
    await memory.ingest("u1", history("u1", 3))
    await memory.ingest("u2", history("u2", 3))
    await memory.aclose()
    shutil.rmtree(cache)  # the first answers are gone: another model would answer the rebuild's calls
    journal = store / JOURNAL_FILE
    lines = journal.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["digest"] = "0" * 64  # as if the state had been another one
    journal.write_text("\n".join([lines[0], json.dumps(entry), *lines[2:]]) + "\n")

    later = open_backend("persona_model", store, cache)
    for _ in range(2):
        with pytest.raises(MemoryRebuildError) as refused:
            await later.context("u1", "anything")
        assert f"{journal}:2:" in str(refused.value) and "user 'u1'" in str(refused.value)
        assert "1 of the 1 model calls of the rebuild were not answered by the response cache" in str(refused.value)
    assert (await later.context("u2", "anything")).form == "persona"  # other users are not affected
    await later.aclose()


async def test_a_journal_of_another_backend_configuration_is_refused(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("full", store, cache)
    await memory.ingest("u1", history("u1", 2))
    await memory.aclose()
    later = open_backend("full", store, cache, budget_tokens=99)
    with pytest.raises(MemoryRebuildError, match="not one of memory backend 'full' configured as the run's system is"):
        await later.context("u1", "anything")
    await later.aclose()


def test_only_backends_a_later_process_would_lose_are_journaled(tmp_path):
    env = MemoryEnv(gateway=Gateway({"system": ModelSettings()}), store_dir=tmp_path)
    kinds = {name: type(journaled(create_backend({"backend": name}, env))).__name__ for name in backend_names()}
    assert kinds.pop("none") == "NoMemory"  # keeps nothing
    assert kinds.pop("retrieval") == "RetrievalMemory"  # its store persists exactly; reopened as it is
    assert set(kinds.values()) == {"JournaledMemory"} and len(kinds) == 8
    no_store = create_backend({"backend": "profile"}, MemoryEnv(gateway=Gateway({"system": ModelSettings()})))
    assert journaled(no_store) is no_store


async def test_a_torn_retrieval_events_file_is_cut_not_an_error(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    memory = open_backend("retrieval", store, cache, method="bm25")
    await memory.ingest("u1", history("u1", 3))
    held = await memory.state_digest("u1")
    await memory.aclose()
    (events_file,) = (store / "retrieval" / "events").glob("*.jsonl")
    events_file.write_text(events_file.read_text() + '{"user_id": "u1", "event": {"id": "u1:m')

    later = open_backend("retrieval", store, cache, method="bm25")
    assert await later.state_digest("u1") == held
    assert [e.id for e in later.events.events("u1")] == ["u1:m1", "u1:m2", "u1:p1"]
    await later.aclose()


# --------------------------------------------------------------------------- names that are names


@pytest.mark.parametrize("name", ["../../../x", "/abs/x", "a/b", "..", ".", "", "  ", "a\\b", "tab\there"])
def test_a_system_name_that_is_a_path_is_refused_at_recipe_load(name):
    with pytest.raises(ValidationError):
        SystemSpec(name=name)
    data = {
        "name": "r",
        "benchmark": {"name": "sample"},
        "judges": [{"name": "lampqa_aspects"}],
        "systems": [{"name": "fine", "memory": {"backend": "none"}}, {"name": name, "memory": {"backend": "none"}}],
    }
    with pytest.raises(ConfigError) as refused:
        parse_recipe(data, "r.toml")
    message = str(refused.value)
    assert "systems[1].name" in message and "\n" not in message


@pytest.mark.parametrize("name", ["direct-full", "direct full", "ünïcode_系统", "v1.2", "..a"])
def test_names_that_are_names_pass(name):
    assert SystemSpec(name=name).name == name


def test_a_path_made_of_names_must_stay_inside_the_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert run_path(run, "memory", "direct-full", what="system name") == run.resolve() / "memory" / "direct-full"
    (run / "out").symlink_to(tmp_path)
    for parts in [("memory", "../../x"), ("/abs/x",), ("memory", "..", ".."), (".",), ("out", "x")]:
        with pytest.raises(GraphInputError) as refused:
            run_path(run, *parts, what="system name")
        assert "leads out of the run folder" in str(refused.value)


async def test_a_context_set_by_hand_cannot_put_a_memory_store_outside_the_run_folder(tmp_path):
    system = SystemSpec(name="ok", memory={"backend": "full"}).model_copy(update={"name": "../../escape"})
    (tmp_path / "run").mkdir()
    context = EpisodeContext(run_id="hand", run_dir=str(tmp_path / "run"), system=system)
    try:
        with pytest.raises(GraphInputError, match="system name makes the path 'memory/../../escape'"):
            _ = resources_for(context).memory
    finally:
        await release(context)
    assert not (tmp_path / "escape").exists()


# --------------------------------------------------------------------------- runs: Ctrl-C, kill -9


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal (see test_run_signals.py)


def start(args: list[str], cache: Path) -> subprocess.Popen:
    env = {**os.environ, "ATELIER_CACHE_DIR": str(cache), "STUB_KEY": "sk-stub"}
    return subprocess.Popen(
        [sys.executable, "-m", "atelier.runs.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def records(folder: Path) -> list[dict]:
    path = folder / "results.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # torn by kill -9
            continue
    return out


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError(f"not {what} within {timeout} s")


async def test_an_episode_the_run_shuts_down_under_is_left_unrecorded_not_failed(tmp_path):
    """Ctrl-C: the run closes its checkpoint database, then its stores, while episodes still run. The
    episode that then fails on them did not fail: it is cancelled (nothing recorded; the resumed run
    continues it) rather than recorded as "ProgrammingError: Cannot operate on a closed database"."""
    from atelier.benchmarks.registry import load_cases
    from atelier.graphs.episode import episode_graph_for
    from atelier.graphs.persistence import InlineSqliteSaver, RunSerializer
    from atelier.runs.execution.runner import Runner

    (case,) = load_cases("tiny", limit=1)
    system = SystemSpec(name="direct-full", memory={"backend": "full"})
    slow = ModelSettings(model="scripted?latency_ms=1500")
    context = EpisodeContext(
        run_id="stopping",
        run_dir=str(tmp_path),
        system=system,
        models={"system": slow, "judge": ModelSettings(), "user_sim": ModelSettings()},
    )
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    saver = InlineSqliteSaver(conn, serde=RunSerializer(conn))
    saver.serde.setup()
    graph = episode_graph_for([system], checkpointer=saver)
    try:
        episode = asyncio.create_task(Runner._episode(graph, case, system, context))
        deadline = time.monotonic() + 60
        while not saver.get_tuple({"configurable": {"thread_id": f"{case.id}::direct-full"}}) or graph.get_state(
            {"configurable": {"thread_id": f"{case.id}::direct-full"}}
        ).next != ("direct",):
            assert time.monotonic() < deadline and not episode.done()
            await asyncio.sleep(0.05)
        conn.close()  # what the run's shutdown does while the system's model call is under way
        with pytest.raises(asyncio.CancelledError):
            await episode
    finally:
        await release(context)


@pytest.mark.battery
@pytest.mark.slow
def test_ctrl_c_records_no_episode_as_failed_by_the_shutdown(tmp_path):
    folder = tmp_path / "run"
    args = [
        "run",
        "runs/recipes/quickstart.toml",
        "--model",
        "scripted?latency_ms=300",
        "--limit",
        "4",
        "--concurrency",
        "4",
        "--no-progress",
        "--out",
        str(folder),
    ]
    process = start(args, tmp_path / "cache")
    wait_for(lambda: len(records(folder)) >= 1, process, 120, "one episode done")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    stopped = records(folder)
    assert len(stopped) < 8  # episodes were in flight when it stopped
    assert [r for r in stopped if r["status"] != "ok"] == []  # none recorded "Cannot operate on a closed database"

    resumed = start(args, tmp_path / "cache")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "episodes: 8 scored, 0 failed (of 8)" in err


# the ten backends, one system each, on one case of the sample suite
BACKENDS = [
    "none",
    "persona",
    "full",
    "profile",
    "query_profile",
    "selected",
    "retrieval",
    "mem0",
    "hierarchical",
    "persona_model",
]


class HeldModels(OpenAIStub):
    """An OpenAI-compatible model server that answers a model's requests only once the test
    `release`s that model: every episode waits at its judge for as long as the test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[str, threading.Event] = {"stub-judge": threading.Event(), "stub-ticker": threading.Event()}

    def release(self, model: str) -> None:
        self.gates[model].set()

    def completion(self, body: dict[str, Any], broken: bool = False) -> dict[str, Any]:
        self.gates[body["model"]].wait(timeout=600)
        return super().completion(body, broken)


def recipe(path: Path, models: HeldModels) -> Path:
    """One sample case x the ten backends, judged by the held `stub-judge` model; and `ticker`, whose
    system model (`stub-ticker`) the test releases once the ten are at their judge: its steps then
    write checkpoints, which commits what the ten wrote last (the run's checkpoint database commits
    when a write comes 0.25 s after the last commit, graphs/persistence.py, so a run that only
    waits commits nothing)."""
    stub = f'api_base = "{models.base_url}", api_key_env = "STUB_KEY", timeout_s = 600, max_retries = 0'
    systems = [f'[[systems]]\nname = "{name}"\nmemory = {{ backend = "{name}" }}' for name in BACKENDS]
    systems.append(
        f'[[systems]]\nname = "ticker"\nmemory = {{ backend = "none" }}\n'
        f'models = {{ system = {{ model = "openai/stub-ticker", {stub} }} }}'
    )
    path.write_text(
        f'name = "resume-memory"\nseed = 0\n[benchmark]\nname = "sample"\nsplit = "all"\n'
        f'setting = "context"\nlimit = 1\n[models.system]\nmodel = "scripted"\n[models.memory]\n'
        f'model = "scripted"\n[models.judge]\n{stub.replace(", ", chr(10))}\nmodel = "openai/stub-judge"\n'
        + "\n".join(systems)
        + '\n[[judges]]\nname = "lampqa_aspects"\n[run]\nconcurrency = 11\n'
    )
    return path


def open_checkpoints(folder: Path):
    """The run folder's episode graph over its checkpoints, read-only (the run may be writing them)."""
    from atelier.graphs.episode import episode_graph_for
    from atelier.graphs.persistence import InlineSqliteSaver, RunSerializer

    conn = sqlite3.connect(f"file:{folder / 'checkpoints.sqlite'}?mode=ro", uri=True, check_same_thread=False)
    saver = InlineSqliteSaver(conn, serde=RunSerializer(conn))
    saver.is_setup = True  # read-only: create nothing
    return conn, episode_graph_for([SystemSpec(name=n) for n in BACKENDS], checkpointer=saver)


def steps(folder: Path) -> dict[str, tuple[str, ...]]:
    """Each started episode's next step, as its last committed checkpoint says."""
    if not (folder / "checkpoints.sqlite").exists():
        return {}
    conn, graph = open_checkpoints(folder)
    try:
        threads = [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        return {t: tuple(graph.get_state({"configurable": {"thread_id": t}}).next) for t in threads}
    except sqlite3.OperationalError:  # the table is not there yet
        return {}
    finally:
        conn.close()


def all_at(folder: Path, step: str) -> Callable[[], bool]:
    """Whether the ten backends' episodes are all at `step` (the ticker's is left out)."""

    def reached() -> bool:
        now = {key: next_step for key, next_step in steps(folder).items() if not key.endswith("::ticker")}
        return len(now) == len(BACKENDS) and all(next_step == (step,) for next_step in now.values())

    return reached


def calls_done(folder: Path, node: str) -> set[str]:
    """The systems with a model call of `node` in the run's ledger."""
    path = folder / "ledger.jsonl"
    return {e["system"] for e in ledger(folder) if e["node"] == node} if path.exists() else set()


def rewind(folder: Path, step: str) -> None:
    """Drop every episode's checkpoints after the one whose next step is `step`, and that step's own
    pending writes: what a kill -9 leaves when it lands during `step` (checkpoints are committed in
    order, graphs/persistence.py), while the memory journals keep what the killed process did after."""
    conn, graph = open_checkpoints(folder)
    targets = {}
    for thread in [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]:
        history = list(graph.get_state_history({"configurable": {"thread_id": thread}}))
        (target,) = [s for s in history if s.next == (step,)]
        targets[thread] = target.config["configurable"]["checkpoint_id"]
    conn.close()
    with contextlib.closing(sqlite3.connect(folder / "checkpoints.sqlite")) as writer, writer:
        for thread, checkpoint in targets.items():
            writer.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id > ?", (thread, checkpoint))
            writer.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id >= ?", (thread, checkpoint))


def outcome(folder: Path) -> dict[str, dict]:
    """Per episode: the memory it recalled and its scores (the last record of each key)."""
    latest = {r["key"]: r for r in records(folder)}
    return {
        key: {
            "memory": {k: r["user_context"][k] for k in ("form", "tokens", "event_ids", "text")},
            "scores": r["scores"],
            "status": r["status"],
        }
        for key, r in latest.items()
    }


def memory_states(folder: Path) -> dict[str, dict[str, str]]:
    """Per journaled system: the digest of each user's memory after the journal's last operation.
    (Not hierarchical's: its state holds the times of its operations, another run's other times; a
    resumed run's replay checks it against the digests of the run it resumes.)"""
    out: dict[str, dict[str, str]] = {}
    for journal in sorted((folder / "memory").glob(f"*/{JOURNAL_FILE}")):
        if journal.parent.name == "hierarchical":
            continue
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("digest"):
                out.setdefault(journal.parent.name, {})[entry["user_id"]] = entry["digest"]
    return out


def ledger(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]


@pytest.mark.battery
@pytest.mark.slow
def test_kill_9_after_ingest_mid_pipeline_and_mid_judge_then_resume_changes_no_result(tmp_path):
    """Killed during recall, during the pipeline and during the judge, then resumed: every episode
    recalls the memory (form, tokens, event ids, text) and gets the scores of an uninterrupted run
    on the same response cache, and each memory ends in the same state.

    One run is killed (`kill -9`) while every episode waits on its judge (whose model holds its
    answers); two copies of its folder are rewound to their `direct` and `recall` checkpoints — what
    the kill leaves when it lands during those steps — so the recall copy's episodes resume in a
    process whose backends never saw the user."""
    cache = tmp_path / "cache"
    models = HeldModels().start()
    slow = recipe(tmp_path / "recipe.toml", models)
    folders = {moment: tmp_path / moment for moment in ("judge", "direct", "recall")}

    def args(folder: Path) -> list[str]:
        return ["run", str(slow), "--no-progress", "--no-preflight", "--out", str(folder)]

    killed = start(args(folders["judge"]), cache)
    try:
        wait_for(
            lambda: calls_done(folders["judge"], "direct") >= set(BACKENDS),
            killed,
            240,
            "every system's answer written",
        )
        time.sleep(0.5)
        models.release("stub-ticker")
        wait_for(all_at(folders["judge"], "judge"), killed, 60, "every episode at its judge, committed")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        models.release("stub-judge")
    assert records(folders["judge"]) == []  # killed before any episode ended
    for moment in ("direct", "recall"):
        shutil.copytree(folders["judge"], folders[moment])
        rewind(folders[moment], moment)
        assert {v for k, v in steps(folders[moment]).items() if not k.endswith("::ticker")} == {(moment,)}

    runs = {moment: start(args(folder), cache) for moment, folder in folders.items()}
    runs["whole"] = start(args(tmp_path / "whole"), cache)
    for moment, process in runs.items():
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, (moment, err)
    models.stop()

    expected = outcome(tmp_path / "whole")
    assert len(expected) == len(BACKENDS) + 1 and {e["status"] for e in expected.values()} == {"ok"}
    recalled = {key.split("::")[1]: e["memory"]["tokens"] for key, e in expected.items() if e["memory"]}
    assert all(recalled[name] > 0 for name in BACKENDS if name not in ("none", "persona"))  # (the setting
    for moment, folder in folders.items():  # `context` gives no persona event)
        assert outcome(folder) == expected, moment
        assert memory_states(folder) == memory_states(tmp_path / "whole"), moment
        calls = [(e["system"], e["request_key"]) for e in ledger(folder) if not e["cache_hit"] and e["status"] == "ok"]
        assert len(calls) == len(set(calls)), moment  # no system's provider call made twice (`none` and `persona`
        # ask the same: this setting gives no persona event)
        hierarchical = (folder / "memory" / "hierarchical" / JOURNAL_FILE).read_text().splitlines()
        assert [json.loads(line)["op"] for line in hierarchical] == ["backend", "ingest", "recall"], moment  # no
        # second search heated its sessions, though the recall step ran again in the `recall` copy
    rebuilt = [e for e in ledger(folders["recall"]) if e["node"] == "memory_rebuild"]
    assert {e["system"] for e in rebuilt} == {"profile", "mem0", "hierarchical", "persona_model"}  # LLM-made memory
    assert all(e["cache_hit"] for e in rebuilt)
    for moment, folder in folders.items():  # each resumed episode says from which step
        assert {r.get("resumed_from") for r in records(folder) if r["system"] != "ticker"} == {moment}, moment
    assert {r.get("resumed_from") for r in records(tmp_path / "whole")} == {None}


def test_resumed_step_is_none_for_a_fresh_episode():
    """`Runner._resumed_from` on a graph with no checkpointer (a run's first attempt in tests)."""
    from atelier.runs.execution.runner import Runner

    class NoSaver:
        checkpointer = None

    assert asyncio.run(Runner._resumed_from(NoSaver(), {"configurable": {"thread_id": "x"}})) is None
