"""Live objects behind an `EpisodeContext`, built once per distinct context in a process.

All episodes of one system in one run share a gateway (so one ledger and one response cache)
and one memory backend (so a user's history is ingested once, however many cases they have).
All systems of a run share one web (one sandbox, one web cache), started on first use.
"""

from __future__ import annotations

import asyncio

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from agents.cache import RedisResponseCache, ResponseCache, open_response_cache
from agents.gateway import Gateway
from agents.judges.base import Judge, create_judge
from agents.ledger import Ledger
from agents.structured_output import ModeMemory
from benchmarks.errors import ConfigError
from benchmarks.redaction import active_redactor
from graphs.context import EpisodeContext
from graphs.inputs import GraphInputError
from graphs.sources import SourceStore
from memory.base import MemoryBackend, MemoryEnv
from memory.journal import journaled
from memory.registry import create_backend
from tools.web import Web, build_web


@dataclass
class Resources:
    context: EpisodeContext
    gateway: Gateway
    judges: list[Judge]
    sources: SourceStore  # the texts systems read, by sha256
    _web: Web | None = field(default=None, repr=False)
    _memory: MemoryBackend | None = field(default=None, repr=False)
    _memory_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
                    store = (run_path(context.run_dir, "memory", context.system.name, what="system name")
                             if context.run_dir else None)
                    self._memory = journaled(create_backend(context.system.memory,
                                                            MemoryEnv(gateway=self.gateway, store_dir=store)))
        return self._memory

    async def open_memory(self) -> MemoryBackend:
        """`memory` from a graph node: the backend (its stores, its embedder) is made off the event loop."""
        return self._memory if self._memory is not None else await asyncio.to_thread(lambda: self.memory)

    async def open_web(self) -> Web:
        """`web()` from a graph node: the first call starts the sandbox web off the event loop (a
        server refusing blocking calls on its loop, `langgraph dev`, would stop the node)."""
        return self._web if self._web is not None else await asyncio.to_thread(self.web)

    def web(self) -> Web:
        """The run's web (search + fetch + cache); the sandbox starts on the first call."""
        if self._web is not None:
            return self._web
        with _lock:
            key = _web_key(self.context)
            if key not in _webs:
                _webs[key] = build_web(self.context.web)
            self._web = _webs[key]
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


_lock = threading.Lock()
_resources: dict[str, Resources] = {}
_ledgers: dict[str, Ledger] = {}
_caches: dict[str, ResponseCache | RedisResponseCache] = {}
_webs: dict[str, Web] = {}
# The context objects already seen: a node looks its resources up by identity first (contexts are
# settings, never changed once made), which spares serialising the context on every model call.
_seen: dict[int, tuple[EpisodeContext, str]] = {}


_closers: list[Callable[[EpisodeContext], Awaitable[None]]] = []


def on_release(closer: Callable[[EpisodeContext], Awaitable[None]]) -> Callable[[EpisodeContext], Awaitable[None]]:
    """Have `release` also close what `closer` opened for a context (a pipeline's own servers)."""
    _closers.append(closer)
    return closer


def _web_key(context: EpisodeContext) -> str:
    return f"{context.run_id}:{context.web.model_dump_json()}"


def _shared_ledger(context: EpisodeContext) -> Ledger:
    path = str(Path(context.run_dir) / "ledger.jsonl") if context.run_dir else f"memory:{context.run_id}"
    if path not in _ledgers:
        _ledgers[path] = Ledger(None if path.startswith("memory:") else path, run_id=context.run_id)
    return _ledgers[path]


def _shared_cache(context: EpisodeContext) -> ResponseCache | RedisResponseCache | None:
    if not context.cache_dir:
        return None
    if context.cache_dir not in _caches:
        _caches[context.cache_dir] = open_response_cache(context.cache_dir)
    return _caches[context.cache_dir]


def context_key(context: EpisodeContext) -> str:
    """The context's identity as a string: equal settings, equal key."""
    seen = _seen.get(id(context))
    if seen is not None and seen[0] is context:
        return seen[1]
    key = context.model_dump_json()
    if len(_seen) > 4096:
        _seen.clear()
    _seen[id(context)] = (context, key)
    return key


def resources_for(context: EpisodeContext | None) -> Resources:
    context = context or EpisodeContext()
    key = context_key(context)
    resources = _resources.get(key)
    if resources is not None:
        return resources
    with _lock:
        if key not in _resources:
            try:
                roles = context.role_models()
            except ConfigError as exc:  # a context set by hand (Studio) naming an unknown pipeline or option
                raise GraphInputError(f"runtime context: {exc}") from None
            gateway = Gateway(roles, cache=_shared_cache(context), ledger=_shared_ledger(context),
                              modes=ModeMemory.in_folder(context.run_dir))
            judges = [create_judge(j) for j in context.judges]
            _resources[key] = Resources(context=context, gateway=gateway, judges=judges,
                                        sources=SourceStore.for_run(context.run_dir))
        return _resources[key]


async def release(context: EpisodeContext) -> None:
    """Close what a context opened (memory stores, the web, local model servers) and forget it (end
    of a run). What the web searched and fetched is listed in `<run_dir>/web_log.jsonl`."""
    with _lock:
        resources = _resources.pop(context_key(context), None)
        web = _webs.pop(_web_key(context), None)
    for closer in _closers:  # first: a pipeline's servers (an agent endpoint) may serve the gateway
        await closer(context)
    if resources is not None:
        if resources._memory is not None:
            await resources._memory.aclose()
        await resources.gateway.aclose()
    if web is not None:
        if context.run_dir and web.log:
            with (Path(context.run_dir) / "web_log.jsonl").open("a", encoding="utf-8") as fh:
                redactor = active_redactor()  # a request's identity holds no key; a provider's option might
                fh.writelines(redactor.redact(entry.model_dump_json()) + "\n" for entry in web.log)
        await web.aclose()
