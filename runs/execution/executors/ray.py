"""`ray`: episodes run on a Ray cluster's nodes, in episode-worker actors that hold a run's resources.

    atelier run RECIPE --executor ray --ray-address 127.0.0.1:6379

The driver (the `atelier run` process) connects to the cluster, starts one `EpisodeWorker` actor
per node (or `[run.ray] workers`) and one `ModelLimitsActor` on its own node, and hands each
episode to a worker — the one that already serves the episode's (system, user) when it has room,
so a user's history is ingested on few nodes. A worker runs the runner's own episode function on
its own event loop, many episodes at once, and returns with the record everything the episode
produced; the driver alone writes the run folder:

- ledger lines and web log entries (captured per episode) are appended by the driver;
- files the episode wrote under the run folder (judge artifacts, web cache records, ...) are
  written in a node-local scratch folder and copied to the run folder by the driver;
- checkpoints are taken in memory and written into the run folder's checkpoint database.

Memory backends' stores (chromadb, mem0) live in the worker's scratch folder: each worker ingests
the users it serves, so two nodes serving one user each hold that user's whole history and never
share a store. A worker or node that dies takes its in-flight episodes with it: Ray restarts the
actor (elsewhere when the node is gone, up to `[run.ray] max_retries` times) and runs them again; what the lost
attempt did never reached the driver, so nothing is counted twice — its model calls were made,
though, and only the responses kept in the shared cache (`[cache] url`) spare the retry paying again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atelier.agents.models.ledger import LedgerEntry
from atelier.agents.models.structured_output import MODES_FILE
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically, write_if_absent
from atelier.graphs.inputs import setting_of
from atelier.runs.execution.executors.base import Episode, EpisodeFn
from atelier.runs.folder.results import ResultRecord

if TYPE_CHECKING:  # ray and langchain are imported where used
    from langchain_core.runnables import RunnableConfig
    from ray import ObjectRef

    from atelier.benchmarks.case import Case

# files the driver writes itself from what episodes return, and node-local stores that stay put
_NOT_COPIED = ("ledger.jsonl", "web_log.jsonl", "memory")
# run-folder files a worker starts from and the driver merges back (not write-once): the structured-
# output mode each endpoint accepted, so every worker and a resumed run ask in the same mode
_SHARED_STATE = (MODES_FILE,)
# passed on to the workers when set in the driver's environment (plus every role's api_key_env)
_FORWARDED_ENV = ("ATELIER_CACHE_DIR", "ATELIER_STATE_DIR", "ATELIER_DATA_DIR", "HF_HOME")


@dataclass
class EpisodeOutput:
    """What a worker returns for one episode."""

    record: ResultRecord
    calls: list[LedgerEntry] = field(default_factory=list)
    web_log: list[str] = field(default_factory=list)  # web_log.jsonl lines
    files: dict[str, bytes] = field(default_factory=dict)  # run-folder relative path -> content
    checkpoints: list[Any] = field(default_factory=list)  # CheckpointTuples of the episode's thread
    node: str = ""  # where it ran
    restarted_worker: bool = False  # on a worker Ray restarted (its node or process died)


class _NewFiles:
    """Files written under a folder since the last call. Only folders whose listing changed are
    read again, so a large web cache costs one stat per folder; atomic writers' dot-files are left out."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._folders: dict[Path, tuple[int | None, list[Path]]] = {}  # folder -> (mtime when settled, subfolders)
        self._seen: dict[str, tuple[int, int]] = {}

    def collect(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        stack = [self.root]
        while stack:
            folder = stack.pop()
            try:
                mtime = folder.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            known = self._folders.get(folder)
            if known is None or known[0] != mtime:
                entries = list(os.scandir(folder))
                subfolders = [
                    Path(e.path)
                    for e in entries
                    if e.is_dir(follow_symlinks=False) and not (folder == self.root and e.name in _NOT_COPIED)
                ]
                # a listing changed within the last second may change again within the same mtime tick
                settled = mtime if time.time_ns() - mtime > 1_000_000_000 else None
                self._folders[folder] = (settled, subfolders)
                for entry in entries:
                    if (
                        entry.name.startswith(".")
                        or entry.name.endswith(".tmp")
                        or not entry.is_file(follow_symlinks=False)
                    ):
                        continue
                    relative = Path(entry.path).relative_to(self.root).as_posix()
                    if folder == self.root and entry.name in _NOT_COPIED:
                        continue
                    stat = entry.stat()
                    if self._seen.get(relative) != (stat.st_size, stat.st_mtime_ns):
                        self._seen[relative] = (stat.st_size, stat.st_mtime_ns)
                        out[relative] = Path(entry.path).read_bytes()
            stack += self._folders[folder][1]
        return out


class EpisodeWorker:
    """The actor's body (wrapped by `ray.remote` in `RayExecutor`): one per node, many episodes at
    once on one event loop, its resources (gateway, memory stores, web) kept across episodes."""

    def __init__(
        self,
        run_id: str,
        run_dir: str,
        scratch_root: str | None,
        env: dict[str, str],
        systems: list[Any],
        shared_state: dict[str, bytes],
    ) -> None:
        for name, value in env.items():
            os.environ[name] = value
        import ray

        from atelier.benchmarks.common.offline import apply_offline_defaults

        apply_offline_defaults()  # before litellm or chromadb load
        import litellm  # noqa: F401  (seconds to import: paid while the worker starts, not by its first episode)

        from atelier.agents.models.gateway import set_model_limits
        from atelier.runs.execution.executors.limits import ClusterLimits

        set_model_limits(ClusterLimits(run_id))
        self._cases_known = asyncio.Lock()
        self._cpu_at_first: float | None = None  # CPU time when the first episode came
        self._has_cases = False
        self.run_id = run_id
        self.run_dir = run_dir
        self.node = ray.get_runtime_context().get_node_id()
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        root = Path(scratch_root or Path(tempfile.gettempdir()) / "atelier-ray")
        self.scratch = root / run_id / f"{self.node[:12]}-{os.getpid()}"
        no_follow.make_folders(self.scratch)
        for name, content in shared_state.items():  # what the run folder holds of them, as the driver read it
            write_atomically(self.scratch / name, content, redact=False)
        self.new_files = _NewFiles(self.scratch)
        self.new_files.collect()  # ... is not new
        self.contexts: dict[str, Any] = {}
        from langgraph.checkpoint.memory import InMemorySaver

        from atelier.graphs.episode import episode_graph_for
        from atelier.graphs.heap import settle_heap
        from atelier.graphs.serde import serializer

        self.saver = InMemorySaver(serde=serializer())
        self.graph = episode_graph_for(systems, checkpointer=self.saver)  # the driver's graph, here
        settle_heap()  # the worker's process ends with the run

    async def ready(self) -> str:
        return self.node

    def _here(self, context):
        """The episode's context with the run folder replaced by this worker's scratch folder (and
        the run folder's web cache by the scratch one's): the driver alone writes the run folder."""
        key = context.model_dump_json()
        if key not in self.contexts:
            update: dict[str, Any] = {"run_dir": str(self.scratch)}
            web, own = context.web, Path(self.run_dir) / "web"
            if web.cache_dir is not None and Path(web.cache_dir) == own:
                update["web"] = web.model_copy(update={"cache_dir": self.scratch / "web"})
            elif web.copy_dir is not None and Path(web.copy_dir) == own:
                update["web"] = web.model_copy(update={"copy_dir": self.scratch / "web"})
            self.contexts[key] = context.model_copy(update=update)
        return self.contexts[key]

    async def _remember_cases(self, cases: list[Any]) -> None:
        """Remember the run's cases as the driver did (episodes' state holds only a case reference; a
        system's `random_profile` reads another case). `cases` wraps one object reference, so Ray
        hands it over as is and only a new (or restarted) worker fetches them, once."""
        async with self._cases_known:
            if not self._has_cases:
                from atelier.graphs.inputs import remember_cases

                remember_cases(self.run_id, await cases[0])
                self._has_cases = True

    async def run(
        self, episode_fn: EpisodeFn, episode: Episode, checkpoints: list[Any], cases: list[Any]
    ) -> EpisodeOutput:
        from atelier.agents.models.ledger import capture_calls
        from atelier.benchmarks.common.redaction import Redactor, redacting
        from atelier.tools.web import capture_web_log

        if self._cpu_at_first is None:
            self._cpu_at_first = time.process_time()
        await self._remember_cases(cases)
        context = self._here(episode.context)
        thread: RunnableConfig = {"configurable": {"thread_id": episode.key}}
        await self.saver.adelete_thread(episode.key)  # a retried attempt starts from what the driver had
        await copy_checkpoints(checkpoints, self.saver)
        # the worker's own files (its scratch ledger, checkpoints) blank the keys its context knows, as the driver's do
        with capture_calls() as calls, capture_web_log() as web_log, redacting(Redactor.for_settings(context)):
            record = await episode_fn(self.graph, episode.case, episode.system, context)
        taken = [t async for t in self.saver.alist(thread)]
        await self.saver.adelete_thread(episode.key)
        return EpisodeOutput(
            record=record,
            calls=list(calls),
            web_log=[e.model_dump_json() for e in web_log],
            files=self.new_files.collect(),
            checkpoints=taken,
            node=self.node,
            restarted_worker=self.restarted,
        )

    async def shutdown(self) -> dict[str, Any]:
        """Close what the worker's contexts opened and remove its scratch folder; return what the
        worker's process used: CPU seconds from its first episode on, peak RSS."""
        import resource

        from atelier.graphs.inputs import forget_cases
        from atelier.graphs.resources import release

        for context in self.contexts.values():
            await release(context)
        forget_cases(self.run_id)
        shutil.rmtree(self.scratch, ignore_errors=True)
        cpu = time.process_time() - self._cpu_at_first if self._cpu_at_first is not None else 0.0
        return {
            "node": self.node,
            "episodes_cpu_s": cpu,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }


async def copy_checkpoints(tuples: list[Any], saver) -> None:
    """Write checkpoint tuples (one thread's, any namespace) into another checkpointer."""
    for t in sorted(tuples, key=lambda t: t.checkpoint["id"]):
        parent = t.parent_config or {
            "configurable": {k: v for k, v in t.config["configurable"].items() if k != "checkpoint_id"}
        }
        await saver.aput(parent, t.checkpoint, t.metadata, t.checkpoint.get("channel_versions", {}))
        writes: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for task_id, channel, value in t.pending_writes or []:
            writes[task_id].append((channel, value))
        for task_id, pairs in writes.items():
            await saver.aput_writes(t.config, pairs, task_id)


async def thread_checkpoints(saver, thread_id: str) -> list[Any]:
    return [t async for t in saver.alist({"configurable": {"thread_id": thread_id}})]


class RayExecutor:
    name = "ray"

    def __init__(
        self,
        episode_fn: EpisodeFn,
        graph: Any,
        *,
        systems: list[Any],
        settings,
        concurrency: int,
        run_id: str,
        run_dir: Path,
        env: dict[str, str],
        progress: bool = True,
    ) -> None:
        self.episode_fn = episode_fn
        self.saver = graph.checkpointer
        self.systems = list(systems)
        self.settings = settings
        self.concurrency = concurrency
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.env = env
        self.progress = progress
        self.workers: list[Any] = []
        self.in_flight: list[int] = []
        self.gone: set[int] = set()  # workers Ray will not restart again
        self.worker_usage: list[dict[str, Any]] = []  # what each worker's process used (at aclose)
        self.limits = None
        self.address: str | None = None
        self._cases: ObjectRef[list[Case]] | None = None
        self._connected_here = False
        self._files_lock = asyncio.Lock()
        self.node_names: dict[str, str] = {}  # node id -> address
        self.placed: dict[str, int] = defaultdict(int)  # episodes finished per node address
        self.on_restarted = 0
        self.lost = 0

    # ------------------------------------------------------------------ start and stop

    async def start(self) -> RayExecutor:
        from atelier.benchmarks.common.errors import ConfigError

        address = self.settings.address or os.environ.get("RAY_ADDRESS")
        if address is None and "ray" not in sys.modules:
            # a one-machine cluster for this run alone: Ray then keeps every address on loopback
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        if not ray.is_initialized():
            import logging

            options: dict[str, Any] = {}
            if address is None:
                options = {"include_dashboard": False}
            try:
                ray.init(
                    address=address, namespace="atelier", log_to_driver=False, logging_level=logging.WARNING, **options
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(f"[run.ray] address {address!r}: cannot connect to a Ray cluster: {exc}") from None
            self._connected_here = True
        from atelier.runs.execution.executors.limits import start_limits_actor

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.address = address or ray.get_runtime_context().gcs_address
        driver_node = ray.get_runtime_context().get_node_id()
        self.limits = start_limits_actor(self.run_id, driver_node)
        count = self.settings.workers or len(nodes)
        per_worker = max(1, math.ceil(self.concurrency / count))
        worker = ray.remote(EpisodeWorker).options(
            num_cpus=self.settings.cpus_per_worker,
            max_concurrency=per_worker,
            # a worker is restarted up to max_retries times; its episodes in flight are retried on each
            # restart (-1: however long the dead node takes to be noticed; a bounded count could be spent
            # on "connection refused" before the restart)
            max_restarts=self.settings.max_retries,
            max_task_retries=-1,
            scheduling_strategy="SPREAD",
        )
        from atelier.graphs.inputs import remembered_cases

        scratch = self.settings.scratch_dir
        # once in the object store for every worker, held until the run ends: a worker Ray restarts after
        # its node died fetches them again (by the reference each episode carries, not by a constructor
        # argument, which Ray would have to keep for restarts)
        self._cases = ray.put(remembered_cases(self.run_id))
        shared = {name: (self.run_dir / name).read_bytes() for name in _SHARED_STATE if (self.run_dir / name).exists()}
        self.workers = [
            worker.remote(self.run_id, str(self.run_dir), scratch, self.env, self.systems, shared) for _ in range(count)
        ]
        self.in_flight = [0] * count
        ready = [w.ready.remote() for w in self.workers]
        cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
        done, pending = await asyncio.to_thread(ray.wait, ready, num_returns=len(ready), timeout=300)
        if pending:
            await self.aclose()
            raise ConfigError(
                f"[run.ray]: {len(pending)} of {count} episode workers could not start within 300 s (the cluster has "
                f"{len(nodes)} node(s) with {cpus:g} CPUs; each worker reserves cpus_per_worker = "
                f"{self.settings.cpus_per_worker:g})"
            )
        placed = await asyncio.gather(*ready)
        if self.progress:
            print(
                f"ray: {len(nodes)} node(s), {cpus:g} CPUs; {count} episode workers on {len(set(placed))} node(s), "
                f"up to {per_worker} episodes each",
                file=sys.stderr,
            )
        return self

    async def aclose(self) -> None:
        import ray

        if self.placed or self.lost:
            self._write_placement()
            if self.progress:
                where = ", ".join(f"{node}: {n}" for node, n in sorted(self.placed.items()))
                print(
                    f"ray: episodes per node {where}; {self.on_restarted} on restarted workers, {self.lost} lost",
                    file=sys.stderr,
                )
        if self.workers:
            stops = [w.shutdown.remote() for w in self.workers]
            stopped, _ = await asyncio.to_thread(ray.wait, stops, num_returns=len(stops), timeout=60)
            for ref in stopped:
                with contextlib.suppress(ray.exceptions.RayError):
                    self.worker_usage.append(ray.get(ref))
            for w in self.workers:
                ray.kill(w)
            self.workers = []
        if self.limits is not None:
            ray.kill(self.limits)
            self.limits = None
        if self._connected_here:
            ray.shutdown()
            self._connected_here = False

    # ------------------------------------------------------------------ episodes

    def _choose(self, episode: Episode) -> int | None:
        """The worker that serves this (system, user), unless it is full or gone: then the least busy
        one still alive; None when every worker is gone."""
        alive = [i for i in range(len(self.workers)) if i not in self.gone]
        if not alive:
            return None
        identity = f"{episode.system.name}\0{episode.case.user_id}".encode()
        preferred = int(hashlib.sha256(identity).hexdigest(), 16) % len(self.workers)
        room = math.ceil(self.concurrency / len(self.workers))
        if preferred in alive and self.in_flight[preferred] < room:
            return preferred
        return min(alive, key=self.in_flight.__getitem__)

    async def run(self, episode: Episode) -> ResultRecord:
        import ray

        index = self._choose(episode)
        if index is None:
            self.lost += 1
            return _lost(episode, "every episode worker died more often than [run.ray] max_retries")
        self.in_flight[index] += 1
        try:
            before = await thread_checkpoints(self.saver, episode.key) if self.saver else []
            # Ray runs the episode again on the worker it restarts (elsewhere when the node is gone)
            output: EpisodeOutput = await self.workers[index].run.remote(
                self.episode_fn, episode, before, [self._cases]
            )
        except ray.exceptions.ActorDiedError as exc:  # restarted max_retries times already: gone for good
            self.gone.add(index)
            self.lost += 1
            return _lost(episode, f"{type(exc).__name__}: {exc}")
        except (ray.exceptions.RayError, ConnectionError) as exc:
            self.lost += 1
            return _lost(episode, f"{type(exc).__name__}: {exc}")
        finally:
            self.in_flight[index] -= 1
        await self._deliver(episode, output)
        self.placed[self._node_name(output.node)] += 1
        self.on_restarted += output.restarted_worker
        return output.record

    def _node_name(self, node_id: str) -> str:
        if node_id not in self.node_names:
            import ray

            found = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
            self.node_names[node_id] = f"{found.get(node_id, '?')} ({node_id[:8]})"
        return self.node_names[node_id]

    def _write_placement(self) -> None:
        """`executor.json` in the run folder: where this session's episodes ran (one entry per session)."""
        import json

        path = self.run_dir / "executor.json"
        sessions = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
        sessions.append(
            {
                "executor": "ray",
                "address": self.address,
                "finished_at": time.time(),
                "workers": len(self.workers),
                "episodes_per_node": dict(self.placed),
                "episodes_on_restarted_workers": self.on_restarted,
                "episodes_lost": self.lost,
            }
        )
        write_atomically(path, json.dumps(sessions, indent=2) + "\n")  # a link in its place is replaced

    async def _deliver(self, episode: Episode, output: EpisodeOutput) -> None:
        """Write what the episode produced into the run folder: ledger, web log, files, checkpoints."""
        from atelier.benchmarks.common import no_follow
        from atelier.benchmarks.common.redaction import active_redactor
        from atelier.graphs.resources import resources_for

        if output.calls:
            resources_for(episode.context).gateway.ledger.append(output.calls)
        async with self._files_lock:
            if output.web_log:
                redactor = active_redactor()
                with no_follow.open_file(self.run_dir / "web_log.jsonl", "a") as fh:
                    fh.writelines(redactor.redact(line) + "\n" for line in output.web_log)
            for relative, content in output.files.items():
                if relative in _SHARED_STATE:
                    _merge_modes(self.run_dir / relative, content)
                else:
                    write_if_absent(self.run_dir / relative, content)  # content-addressed or write-once
        if self.saver is not None and output.checkpoints:
            await copy_checkpoints(output.checkpoints, self.saver)


def _merge_modes(path: Path, content: bytes) -> None:
    """A worker's structured-modes file merged into the run folder's: per endpoint, the latest learned."""
    import json

    def read(raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    merged = read(path.read_bytes()) if path.exists() else {}
    for endpoint, entry in read(content).items():
        known = merged.get(endpoint)
        if not isinstance(entry, dict):
            continue
        if not isinstance(known, dict) or str(entry.get("learned_at", "")) >= str(known.get("learned_at", "")):
            merged[endpoint] = entry
    write_atomically(path, json.dumps(merged, indent=2, sort_keys=True) + "\n")


def _lost(episode: Episode, reason: str) -> ResultRecord:
    first_line = (reason.strip().splitlines() or [""])[0][:300]
    return ResultRecord(
        key=episode.key,
        run_id=episode.context.run_id,
        case_id=episode.case.id,
        system=episode.system.name,
        benchmark=episode.case.benchmark,
        user_id=episode.case.user_id,
        setting=setting_of(episode.case, episode.system),
        epoch=episode.epoch,
        control=episode.control,
        status="error",
        error=f"worker lost: {first_line}",
        finished_at=time.time(),
    )


def forwarded_env(api_key_envs: list[str]) -> dict[str, str]:
    names = list(_FORWARDED_ENV) + [n for n in api_key_envs if n]
    return {name: os.environ[name] for name in names if name in os.environ}
