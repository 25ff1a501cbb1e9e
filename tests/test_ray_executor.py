"""The Ray executor on a real two-node cluster (a head and a worker, separate process trees on
loopback): the quickstart gives the local executor's scores, a model's max_concurrency holds across
the cluster (counted at the stub server), the shared Redis cache serves every node, a resumed run
works, and a worker node killed midway loses and doubles nothing.

One cluster serves the module (Ray starts slowly); the node-killing test runs last.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe
from tests.openai_stub import OpenAIStub
from tests.ray_cluster import DRIVER_ENV, LocalRayCluster, free_port

# a Ray cluster of nodes per module and episodes on it: minutes, so in the battery .ci/run runs
pytestmark = pytest.mark.battery

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "runs" / "recipes" / "quickstart.toml"


@pytest.fixture(scope="module")
def cluster():
    saved = {name: os.environ.get(name) for name in DRIVER_ENV}
    os.environ.update(DRIVER_ENV)  # this process is the driver of every run below
    cluster = LocalRayCluster(cpus_per_node=2)
    try:
        cluster.start_head()
        cluster.add_worker()
        cluster.wait_for(nodes=2)
        yield cluster
    finally:
        cluster.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scores(folder: Path) -> dict[str, dict]:
    return {r["key"]: r["scores"] for r in lines(folder / "results.jsonl")}


def calls_per_episode(folder: Path) -> collections.Counter:
    return collections.Counter((e["case_id"], e["system"]) for e in lines(folder / "ledger.jsonl"))


def placement(folder: Path) -> dict:
    return json.loads((folder / "executor.json").read_text())[-1]


@pytest.fixture(scope="module")
def local_quickstart(tmp_path_factory):
    """The quickstart run by the local executor, with a cache of its own: what the cluster must match."""
    folder = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATELIER_CACHE_DIR", str(folder / "cache"))
        return run_recipe(load_recipe(QUICKSTART), folder / "run", progress=False).path


def test_quickstart_on_two_nodes_scores_like_the_local_executor(cluster, local_quickstart, tmp_path, cache_dir):
    local = local_quickstart  # the cluster computes every answer itself (cache_dir is empty)
    on_ray = load_recipe(QUICKSTART).with_overrides(executor="ray", ray_address=cluster.address)
    remote = run_recipe(on_ray, tmp_path / "ray", progress=False).path

    assert len(scores(remote)) == 16 and all(r["status"] == "ok" for r in lines(remote / "results.jsonl"))
    assert scores(remote) == scores(local)
    responses = lambda f: {r["key"]: r["response"]["text"] for r in lines(f / "results.jsonl")}
    assert responses(remote) == responses(local)
    # the driver wrote every episode's calls once, tagged as the local run's are
    assert calls_per_episode(remote) == calls_per_episode(local)
    assert {e["node"] for e in lines(remote / "ledger.jsonl")} == {e["node"] for e in lines(local / "ledger.jsonl")}
    assert json.loads((remote / "summary.json").read_text())["systems"].keys() == {"direct-none", "direct-full"}
    where = placement(remote)
    assert len(where["episodes_per_node"]) == 2 and sum(where["episodes_per_node"].values()) == 16
    assert {a.split()[0] for a in where["episodes_per_node"]} == {"127.0.0.2", "127.0.0.3"}
    # checkpoints reached the driver's database: every episode's thread is there, finished
    import sqlite3

    with sqlite3.connect(remote / "checkpoints.sqlite") as db:
        threads = {row[0] for row in db.execute("select distinct thread_id from checkpoints")}
    assert threads == set(scores(remote))
    # nothing of the run folder was written on the nodes' side but through the driver
    assert not list(remote.glob("memory"))


def test_epochs_on_the_cluster_key_every_record_and_thread_by_epoch(cluster, tmp_path, cache_dir):
    quick = load_recipe(QUICKSTART)
    local = run_recipe(quick.with_overrides(limit=1, epochs=2), tmp_path / "local", progress=False).path
    on_ray = quick.with_overrides(limit=1, epochs=2, executor="ray", ray_address=cluster.address)
    remote = run_recipe(on_ray, tmp_path / "ray", progress=False).path

    records = lines(remote / "results.jsonl")
    keys = [r["key"] for r in records]
    assert len(keys) == 4 and len(set(keys)) == 4 and sorted(r["epoch"] for r in records) == [1, 1, 2, 2]
    assert scores(remote) == scores(local)  # each epoch is its own sample, on the cluster as here
    import sqlite3

    with sqlite3.connect(remote / "checkpoints.sqlite") as db:
        threads = {row[0] for row in db.execute("select distinct thread_id from checkpoints")}
    assert threads == set(keys)
    judged = json.loads((remote / "summary.json").read_text())["systems"]["direct-full"]["judges"]
    assert judged and all("epoch_spread" in stats for stats in judged.values())


class CountingStub(OpenAIStub):
    """The stub server, counting requests in flight (from request to response) and holding each
    for `latency_s`, so concurrent calls overlap."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.in_flight = 0
        self.peak = 0
        self.count_lock = threading.Lock()
        super().__init__(port=0)

    def _handler_class(self):
        stub = self
        base = super()._handler_class()

        class Counting(base):
            def do_POST(self) -> None:
                with stub.count_lock:
                    stub.in_flight += 1
                    stub.peak = max(stub.peak, stub.in_flight)
                self._counted = True
                time.sleep(stub.latency_s)
                super().do_POST()

            def _send(self, *args, **kwargs) -> None:
                if getattr(self, "_counted", False):  # the answer leaves: the call is no longer in flight
                    self._counted = False
                    with stub.count_lock:
                        stub.in_flight -= 1
                super()._send(*args, **kwargs)

        return Counting


def test_max_concurrency_holds_across_the_cluster(cluster, tmp_path, cache_dir):
    with CountingStub(latency_s=0.25) as stub:
        recipe = load_recipe(QUICKSTART).with_overrides(executor="ray", ray_address=cluster.address, limit=6)
        data = recipe.model_dump(mode="python")
        limited = {
            "model": "openai/stub",
            "api_base": stub.base_url,
            "api_key": "sk-test",
            "max_concurrency": 2,
            "max_retries": 0,
        }
        data["models"]["system"] = limited
        data["models"]["judge"] = limited
        data["run"]["concurrency"] = 8
        from atelier.runs.folder.recipe import Recipe

        folder = run_recipe(Recipe.model_validate(data), tmp_path / "limited", progress=False).path
    results = lines(folder / "results.jsonl")
    assert len(results) == 12 and all(r["status"] == "ok" for r in results), [r["error"] for r in results]
    paid = [e for e in lines(folder / "ledger.jsonl") if not e["cache_hit"]]
    assert len(stub.requests) == len(paid) > 12  # every call the ledger says reached the server, did
    assert stub.peak == 2  # calls did overlap, and never more than two at once, though both nodes called
    assert len(placement(folder)["episodes_per_node"]) == 2
    # the structured-output mode the workers learned for the endpoint reached the run folder (a resume reuses it)
    modes = json.loads((folder / "structured_modes.json").read_text())
    assert list(modes) == [f"openai/stub@{stub.base_url.rstrip('/')}"]


@pytest.fixture(scope="module")
def redis_url():
    port = free_port()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"atelier-redis-{port}"
    folder.mkdir(exist_ok=True)
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_searching_pipeline_leaves_its_web_in_the_run_folder_for_replay(cluster, tmp_path, cache_dir):
    """rag with dense retrieval over the user's history (chromadb) searches and reads the sandbox
    web on the nodes; the records reach the run folder, and a local replay from that folder alone
    (no network, no sandbox) recalls the same history and gives the same answers."""
    from atelier.runs.folder.recipe import parse_recipe

    def recipe(name: str, **extra):
        return parse_recipe(
            {
                "name": name,
                "benchmark": {"name": "sample", "split": "all", "setting": "context", "limit": 6},
                "systems": [
                    {"name": "rag", "pipeline": "rag", "memory": {"backend": "retrieval", "method": "dense", "k": 3}}
                ],
                "judges": [{"name": "lampqa_aspects"}],
                "run": {"out_dir": str(tmp_path)},
                **extra,
            }
        )

    remote = run_recipe(
        recipe("remote", run={"out_dir": str(tmp_path), "executor": "ray", "ray": {"address": cluster.address}}),
        tmp_path / "remote",
        progress=False,
    ).path
    assert all(r["status"] == "ok" for r in lines(remote / "results.jsonl"))
    logged = lines(remote / "web_log.jsonl")
    assert {e["kind"] for e in logged} >= {"search"}
    assert all(list((remote / "web" / "records").glob(f"*/{e['key']}.json")) for e in logged)
    shutil.rmtree(cache_dir)
    replayed = run_recipe(
        recipe("replay", web={"mode": "replay", "cache_dir": str(remote / "web")}), tmp_path / "replay", progress=False
    ).path
    text = lambda f: {r["key"]: r["response"]["text"] for r in lines(f / "results.jsonl")}
    assert all(r["status"] == "ok" for r in lines(replayed / "results.jsonl")) and text(replayed) == text(remote)
    recalled = lambda f: {r["key"]: r["user_context"]["event_ids"] for r in lines(f / "results.jsonl")}
    assert recalled(remote) == recalled(replayed) and all(recalled(remote).values())
    assert not (remote / "memory").exists()  # the workers' chromadb stores stayed on their nodes


def test_resume_on_the_cluster_runs_only_what_is_missing_and_redis_serves_every_worker(
    cluster, tmp_path, cache_dir, redis_url
):
    import redis

    from atelier.runs.folder.recipe import Recipe

    data = (
        load_recipe(QUICKSTART)
        .with_overrides(executor="ray", ray_address=cluster.address, limit=3)
        .model_dump(mode="python")
    )
    data["cache"] = {"url": redis_url}
    recipe = Recipe.model_validate(data)
    folder = run_recipe(recipe, tmp_path / "run", progress=False).path
    complete = lines(folder / "results.jsonl")
    first_calls = lines(folder / "ledger.jsonl")
    assert not any(e["cache_hit"] for e in first_calls)
    assert len(redis.Redis.from_url(redis_url).keys("atelier:llm:*")) == len(first_calls)  # every answer stored
    (folder / "results.jsonl").write_text("\n".join(json.dumps(r) for r in complete[:4]) + "\n")

    run_recipe(recipe, folder, progress=False)  # new workers: what they ask was answered by the first ones
    again = lines(folder / "results.jsonl")
    assert sorted(r["key"] for r in again) == sorted(r["key"] for r in complete)  # each once
    assert {r["key"]: r["scores"] for r in again} == {r["key"]: r["scores"] for r in complete}
    added = lines(folder / "ledger.jsonl")[len(first_calls) :]
    assert {(e["case_id"], e["system"]) for e in added} == {(r["case_id"], r["system"]) for r in complete[4:]}
    assert added and all(e["cache_hit"] for e in added)  # from Redis: no node keeps a disk cache
    assert not (cache_dir / "llm").exists()
    sessions = json.loads((folder / "executor.json").read_text())
    assert len(sessions) == 2 and sum(sessions[1]["episodes_per_node"].values()) == 2


def test_a_worker_node_killed_midway_loses_and_doubles_nothing(cluster, local_quickstart, tmp_path, cache_dir):
    """Last in the module: it takes the worker node down for good."""
    local = local_quickstart
    out = tmp_path / "killed"
    env = {**os.environ, "ATELIER_CACHE_DIR": str(cache_dir)}
    # every call takes 0.3 s: the run lasts long enough to lose a node in the middle of it
    command = [
        sys.executable,
        "-m",
        "atelier.runs.cli",
        "run",
        str(QUICKSTART),
        "--model",
        "scripted?latency_ms=300",
        "--ray-address",
        cluster.address,
        "--no-progress",
        "--out",
        str(out),
    ]
    driver = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            done = len(lines(out / "results.jsonl")) if (out / "results.jsonl").exists() else 0
            if done >= 3:
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.communicate()
        assert 3 <= done < 16
        cluster.kill(cluster.nodes[1])
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, stderr
    results = lines(out / "results.jsonl")
    assert collections.Counter(r["key"] for r in results) == collections.Counter(scores(local).keys())  # each once
    assert all(r["status"] == "ok" for r in results), [r["error"] for r in results if r["error"]]
    assert scores(out) == scores(local)
    # the calls of attempts lost with the node never reached the ledger; the retries' did, once
    assert calls_per_episode(out) == calls_per_episode(local)
    where = placement(out)
    # the killed node's worker was restarted on the head and ran what the node had taken on
    assert where["episodes_lost"] == 0 and where["episodes_on_restarted_workers"] > 0
