"""Live objects behind an `EpisodeContext`, built once per distinct context in a process.

All episodes of one system in one run share a gateway (so one ledger and one response cache)
and one memory backend (so a user's history is ingested once, however many cases they have).
All systems of a run share one web (one sandbox, one web cache), started on first use.

What a run's contexts share is owned by one `RunState` per run id: its ledger, its response
caches, its webs and each context's `Resources`. Releasing a run's last context releases it — the
caches closed, the webs stopped — so a process that runs many runs (tests, a notebook, a bench)
keeps nothing of the ones that ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from atelier.agents.judges.base import Judge, create_judge
from atelier.agents.models.cache import RedisResponseCache, ResponseCache, open_response_cache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.spend import SpendGuard
from atelier.agents.models.structured_output import ModeMemory
from atelier.benchmarks.case import CaseView
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.redaction import active_redactor
from atelier.benchmarks.common.waiting import waiting_for
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import GraphInputError, user_event_ids
from atelier.graphs.sources import SourceStore
from atelier.memory.base import MemoryBackend, MemoryEnv, MemoryQuery, UserContext
from atelier.memory.contract import checked_context, held_to_contract
from atelier.memory.journal import journaled
from atelier.memory.persona_first import latest_persona
from atelier.memory.registry import create_backend
from atelier.tools.web import Web, build_web


@dataclass
class Resources:
    context: EpisodeContext
    gateway: Gateway
    judges: list[Judge]
    sources: SourceStore  # the texts systems read, by sha256
    _web: Web | None = field(default=None, repr=False)
    _memory: MemoryBackend | None = field(default=None, repr=False)
    _memory_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # recall_memory calls made so far, per asyncio task (one execution of a graph step) and where:
    # each call's ledger id (graphs/memory_tool.py)
    recall_counts: weakref.WeakKeyDictionary[Any, dict[str, int]] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )

    @property
    def memory(self) -> MemoryBackend:
        """The system's memory backend, made on first use: a process that only judges, or a Ray
        run's driver (its episodes run on the workers), opens no store in the run folder. In a run
        its store is `<run>/memory/<system>/`, with the memory journal a resumed run rebuilds it from
        (memory/journal.py)."""
        if self._memory is None:
            with self._memory_lock:
                if self._memory is None:
                    context = self.context
                    store = (
                        run_path(context.run_dir, "memory", context.system.name, what="system name")
                        if context.run_dir
                        else None
                    )
                    backend = context.system.memory.get("backend", "none")
                    with waiting_for(
                        f"the {backend} memory of {context.system.name} to open (its store, its embedder)"
                    ):
                        self._memory = journaled(
                            create_backend(context.system.memory, MemoryEnv(gateway=self.gateway, store_dir=store))
                        )
        return self._memory

    async def open_memory(self) -> MemoryBackend:
        """`memory` from a graph node: the backend (its stores, its embedder) is made off the event loop."""
        return self._memory if self._memory is not None else await asyncio.to_thread(lambda: self.memory)

    async def recall(self, owner: CaseView, query: MemoryQuery) -> UserContext:
        """The system's memory's context about `owner`'s user for `query`, once `owner`'s history is in
        it (ingest skips what it has), at the memory's own budget, held to the memory contract
        (memory/contract.py): within the budget, naming only the user's events (else ContractBroken:
        the episode fails), the setting's persona kept or its loss recorded."""
        memory = await self.open_memory()
        await memory.ingest(owner.user_id, owner.history)
        return held_to_contract(
            checked_context(await memory.context(owner.user_id, query), memory.name),
            user_id=owner.user_id,
            budget=memory.budget(None),
            known=user_event_ids(self.context.run_id, owner),
            persona=latest_persona(owner.history),
        )

    async def open_web(self) -> Web:
        """`web()` from a graph node: the first call starts the sandbox web off the event loop (a
        server refusing blocking calls on its loop, `langgraph dev`, would stop the node)."""
        return self._web if self._web is not None else await asyncio.to_thread(self.web)

    def opened_web(self) -> Web | None:
        """The run's web if a step of this run opened it, else None (nothing was searched or fetched)."""
        if self._web is not None:
            return self._web
        with _lock:
            return _run_state(self.context).webs.get(self.context.web.model_dump_json())

    def web(self) -> Web:
        """The run's web (search + fetch + cache); the sandbox starts on the first call."""
        if self._web is not None:
            return self._web
        with _lock:
            webs = _run_state(self.context).webs
            key = self.context.web.model_dump_json()
            if key not in webs:
                with waiting_for("the web to start (a sandbox indexes its corpus)"):
                    webs[key] = build_web(self.context.web)
            self._web = webs[key]
            return self._web


def run_path(run_dir: str | Path, *parts: str, what: str) -> Path:
    """`<run_dir>/<parts...>`, resolved, for parts made from names (a system name, a case or user
    id): refused unless it stays inside the run folder — a name that is `..`, an absolute path or
    holds a separator, or a symlink out of the folder, would put files elsewhere. `what` says what
    the parts came from, for the error."""
    root = Path(run_dir).resolve()
    path = root.joinpath(*parts).resolve()
    if root not in path.parents:  # strictly inside: a name of "." would be the run folder itself
        names = "/".join(parts)
        raise GraphInputError(f"{what} makes the path {names!r}, which leads out of the run folder {root} (to {path})")
    return path


@dataclass
class RunState:
    """What one run's contexts share in this process, released with the run's last context."""

    run_id: str
    ledger: Ledger
    resources: dict[str, Resources] = field(default_factory=dict)  # context key -> its resources
    caches: dict[str, ResponseCache | RedisResponseCache] = field(default_factory=dict)  # by location
    webs: dict[str, Web] = field(default_factory=dict)  # by the web's settings
    # what a pipeline's parallel branches of one episode share while it runs (deep_research: the URLs
    # its researchers read), by (what, episode id); dropped by the pipeline, or with the run
    episode_stores: dict[tuple[str, str], Any] = field(default_factory=dict)
    spend: SpendGuard | None = None  # the run's budget, which every priced call of its gateways holds on

    def cache(self, location: str | None) -> ResponseCache | RedisResponseCache | None:
        if not location:
            return None
        if location not in self.caches:
            self.caches[location] = open_response_cache(location)
        return self.caches[location]


T = TypeVar("T")

_lock = threading.Lock()
_runs: dict[str, RunState] = {}  # run id -> its state, while some context of the run is in use
# The context objects already seen: a node looks its resources up by identity first (contexts are
# settings, never changed once made), which spares serialising the context on every model call.
_seen: dict[int, tuple[EpisodeContext, str]] = {}


_closers: list[Callable[[EpisodeContext], Awaitable[None]]] = []


def on_release(closer: Callable[[EpisodeContext], Awaitable[None]]) -> Callable[[EpisodeContext], Awaitable[None]]:
    """Have `release` also close what `closer` opened for a context (a pipeline's own servers)."""
    _closers.append(closer)
    return closer


def _run_state(context: EpisodeContext) -> RunState:
    """The state of `context`'s run (made on first use; call under `_lock`)."""
    state = _runs.get(context.run_id)
    if state is None:
        ledger = Ledger(Path(context.run_dir) / "ledger.jsonl" if context.run_dir else None, run_id=context.run_id)
        state = _runs[context.run_id] = RunState(context.run_id, ledger)
    return state


def guard_spending(context: EpisodeContext, guard: SpendGuard) -> None:
    """Have every gateway of `context`'s run (made now or later) hold its priced calls on `guard`."""
    with _lock:
        state = _run_state(context)
        state.spend = guard
        for resources in state.resources.values():
            resources.gateway.spend = guard


def episode_store(context: EpisodeContext, what: str, episode: str, make: Callable[[], T]) -> T:
    """The run's store `what` for one episode, made by `make` on first use."""
    with _lock:
        stores = _run_state(context).episode_stores
        if (what, episode) not in stores:
            stores[(what, episode)] = make()
        return cast(T, stores[(what, episode)])


def drop_episode_store(context: EpisodeContext, what: str, episode: str) -> None:
    with _lock:
        run = _runs.get(context.run_id)
        if run is not None:
            run.episode_stores.pop((what, episode), None)


def run_ledger(context: EpisodeContext) -> Ledger:
    """The ledger every gateway of `context`'s run writes to (what the run's progress sums)."""
    with _lock:
        return _run_state(context).ledger


def context_key(context: EpisodeContext) -> str:
    """The context's identity as a string: equal settings, equal key."""
    seen = _seen.get(id(context))
    if seen is not None and seen[0] is context:
        return seen[1]
    # its JSON masks API keys: a digest of them too, so contexts differing only in a role's key (a
    # served graph given each episode's own endpoint token) do not share one gateway
    secrets = [
        s.api_key.get_secret_value() for s in (*context.models.values(), *context.system.models.values()) if s.api_key
    ]
    key = context.model_dump_json() + (hashlib.sha256("\0".join(secrets).encode()).hexdigest() if secrets else "")
    if len(_seen) > 4096:
        _seen.clear()
    _seen[id(context)] = (context, key)
    return key


def resources_for(context: EpisodeContext | None) -> Resources:
    context = context or EpisodeContext()
    key = context_key(context)
    run = _runs.get(context.run_id)
    resources = run.resources.get(key) if run is not None else None
    if resources is not None:
        return resources
    with _lock:
        run = _run_state(context)
        if key not in run.resources:
            try:
                roles = context.role_models()
            except ConfigError as exc:  # a context set by hand (Studio) naming an unknown pipeline or option
                raise GraphInputError(f"runtime context: {exc}") from None
            gateway = Gateway(
                roles,
                cache=run.cache(context.cache_dir),
                ledger=run.ledger,
                modes=ModeMemory.in_folder(context.run_dir),
                spend=run.spend,
            )
            judges = [create_judge(j) for j in context.judges]
            run.resources[key] = Resources(
                context=context, gateway=gateway, judges=judges, sources=SourceStore.for_run(context.run_dir)
            )
        return run.resources[key]


async def release(context: EpisodeContext) -> None:
    """Close what a context opened (memory stores, the web, local model servers) and forget it (end
    of a run). What the web searched and fetched is listed in `<run_dir>/web_log.jsonl`."""
    with _lock:
        run = _runs.get(context.run_id)
        resources = run.resources.pop(context_key(context), None) if run is not None else None
        # the run's last context takes the run's shared state with it: its webs and caches
        ended = run is not None and not run.resources
        if ended:
            del _runs[context.run_id]
    webs = list(run.webs.values()) if run is not None and ended else []
    for closer in _closers:  # first: a pipeline's servers (an agent endpoint) may serve the gateway
        await closer(context)
    if resources is not None:
        if resources._memory is not None:
            await resources._memory.aclose()
        await resources.gateway.aclose()
    for web in webs:
        if context.run_dir and web.log:
            with no_follow.open_file(Path(context.run_dir) / "web_log.jsonl", "a") as fh:
                redactor = active_redactor()  # a request's identity holds no key; a provider's option might
                fh.writelines(redactor.redact(entry.model_dump_json()) + "\n" for entry in web.log)
        await web.aclose()
    for cache in run.caches.values() if run is not None and ended else []:
        cache.close()
