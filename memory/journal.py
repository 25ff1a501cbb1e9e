"""A run's memory journal: each operation that changed a backend's state, in order, so a process
that resumes the run gets the very state back.

A backend keeps what it ingested in its process. A run killed and resumed continues each episode
from its last checkpoint, often past `ingest`, in a process whose backend holds nothing. The
journal (`<run>/memory/<system>/journal.jsonl`, one per system) lets that process rebuild it:

- every ingest that added events is appended once it succeeded: the user, exactly the events the
  backend was given (those it had not seen, by id, in the order given), the clock readings the
  operation made (memory/clock.py), and a digest of the user's state afterwards;
- a recall that changes state (`recall_changes_state`: hierarchical's searches heat sessions) is
  appended too, with the context it returned and, inside a graph, the step that asked for it.

A later process replays a user's entries the first time anything touches that user: the same
ingests, in the same order and the same batches, with the same clock readings, so incremental
updates (profile, persona_model), LLM-driven adds (mem0) and heat (hierarchical) come out as they
did; the LLM calls they make are the calls made before, which the response cache answers. After
each entry the state's digest must equal the recorded one, and a replayed recall must return the
recorded context: otherwise the rebuild is refused with a `MemoryRebuildError` (say, the response
cache was cleared), since the results it led to would differ. A recall the graph asks for again
(the same step of the same episode, its checkpoint lost to the kill) is answered with the recorded
context instead of searching again, so no search is counted twice.

Backends whose own store holds their state exactly (`persists_state`: retrieval) are reopened,
not journaled; those that keep nothing (`none`) need neither.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from atelier.agents.models.ledger import call_tags, capture_calls
from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl, validation_error
from atelier.benchmarks.contract import told_apart
from atelier.memory.base import MemoryBackend, MemoryQuery, UserContext, as_query
from atelier.memory.clock import ClockTape, on_tape
from atelier.memory.contract import checked_context

JOURNAL_FILE = "journal.jsonl"
REBUILD_STEP = "memory_rebuild"  # the ledger's node for the model calls a rebuild makes


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackendEntry(_Entry):
    """The first line: which backend, configured how, the journal belongs to."""

    op: Literal["backend"] = "backend"
    backend: str
    config: dict[str, Any]


class IngestEntry(_Entry):
    op: Literal["ingest"] = "ingest"
    user_id: str
    events: list[HistoryEvent]
    clock: list[float] = Field(default_factory=list)
    digest: str | None = None


class RecallEntry(_Entry):
    op: Literal["recall"] = "recall"
    user_id: str
    task: str | None = Field(default=None, description="The graph step that asked (`graph_task`).")
    query: MemoryQuery
    budget: int | None = None
    context: UserContext
    clock: list[float] = Field(default_factory=list)
    digest: str | None = None


JournalEntry = Annotated[BackendEntry | IngestEntry | RecallEntry, Field(discriminator="op")]
_ENTRY: TypeAdapter[BackendEntry | IngestEntry | RecallEntry] = TypeAdapter(JournalEntry)


class MemoryRebuildError(DataError):
    """A memory rebuilt from its journal is not the one the run had."""


_TASK_ID = re.compile(r":[^|]*")  # the task id after each node name of a checkpoint namespace


def graph_task() -> str | None:
    """The LangGraph step running this code, as the same step of a resumed episode names it too: the
    thread, the path of nodes (subgraphs first) and the step number; None outside a graph. (Not the
    task id: it derives from the checkpoint id, which a step redone after a kill gets anew.)"""
    try:
        from langgraph.config import get_config

        config = get_config()
    except RuntimeError:  # not inside a graph run
        return None
    thread = config.get("configurable", {}).get("thread_id")
    metadata = config.get("metadata", {})
    namespace, step = metadata.get("langgraph_checkpoint_ns"), metadata.get("langgraph_step")
    if thread is None or not namespace or step is None:
        return None
    return f"{thread}|{_TASK_ID.sub('', namespace)}|{step}"


def needs_journal(backend: MemoryBackend) -> bool:
    """Whether a run's later process would lose this backend's state without a journal."""
    return backend.keeps_state and not backend.persists_state


class JournaledMemory(MemoryBackend):
    """`inner` with every state-changing operation journaled in `path`, and replayed from it."""

    def __init__(self, inner: MemoryBackend, path: Path) -> None:
        super().__init__(inner.config, inner.env)
        self.inner = inner
        # what the backend is, on the instance (a wrapper's class says nothing about it)
        self.name = inner.name  # type: ignore[misc]
        self.config_model = inner.config_model  # type: ignore[misc]
        self.recall_changes_state = inner.recall_changes_state  # type: ignore[misc]
        self.path = Path(path)
        self._opened = False
        self._file: Any = None
        self._pending: dict[str, list[tuple[int, IngestEntry | RecallEntry]]] = {}
        self._broken: dict[str, MemoryRebuildError] = {}
        self._seen: defaultdict[str, set[str]] = defaultdict(set)
        # per user, each event an earlier process journaled, by id, with its line: what this run's
        # cases must still say of it (the cases changed since would leave the memory stale)
        self._journaled: defaultdict[str, dict[str, tuple[HistoryEvent, int]]] = defaultdict(dict)
        self._recalls: dict[str, RecallEntry] = {}  # by graph step (recalls that change state only)
        self.replayed: dict[str, int] = {}  # user id -> entries replayed in this process

    def __getattr__(self, name: str) -> Any:  # what the backend offers beyond the protocol (profile(), tiers(), ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ the file

    def _open(self) -> None:
        """Read what earlier processes journaled (a torn last line is cut off), empty the backend's
        store of what they left (the journal rebuilds it), and open the file for appending."""
        if self._opened:
            return
        config = self.inner.config.model_dump(mode="json")
        lines = read_appended_jsonl(self.path, repair=True).values
        pending: dict[str, list[tuple[int, IngestEntry | RecallEntry]]] = {}
        for number, data in lines:
            try:
                entry = _ENTRY.validate_python(data)
            except ValidationError as exc:
                raise validation_error(exc, file=self.path, line=number) from None
            if number == lines[0][0]:
                if not isinstance(entry, BackendEntry) or (entry.backend, entry.config) != (self.inner.name, config):
                    raise MemoryRebuildError(
                        f"this journal is not one of memory backend {self.inner.name!r} configured as the run's "
                        f"system is ({config}); restore the run's recipe, or choose a new --out folder",
                        file=self.path,
                        line=number,
                    )
            elif isinstance(entry, BackendEntry):
                raise DataError(
                    "a second backend line: the journal was written by two runs", file=self.path, line=number
                )
            else:
                pending.setdefault(entry.user_id, []).append((number, entry))
        self.inner.reset_store()
        no_follow.make_folders(self.path.parent)
        self._file = no_follow.open_file(self.path, "a")
        if not lines:
            self._append(BackendEntry(backend=self.inner.name, config=config))
        self._pending, self._opened = pending, True

    def _append(self, entry: _Entry) -> None:
        # one write of a whole line, flushed: a kill leaves at most a torn last line, cut off when read
        self._file.write(entry.model_dump_json() + "\n")
        self._file.flush()

    # ------------------------------------------------------------------ rebuilding a user

    async def _ready(self, user_id: str) -> None:
        """The user's journaled operations replayed, once, before this process touches the user."""
        self._open()
        if user_id in self._broken:
            raise self._broken[user_id]
        entries = self._pending.pop(user_id, None)
        if not entries:
            return
        try:
            with capture_calls() as calls, call_tags(node=REBUILD_STEP):
                for number, entry in entries:
                    await self._replay(number, entry, calls)
        except MemoryRebuildError as exc:
            self._broken[user_id] = exc
            raise
        self.replayed[user_id] = len(entries)

    async def _replay(self, number: int, entry: IngestEntry | RecallEntry, calls: list) -> None:
        user_id = entry.user_id
        tape = ClockTape(entry.clock)
        with on_tape(tape):
            if isinstance(entry, IngestEntry):
                await self.inner.ingest(user_id, entry.events)
                self._seen[user_id].update(e.id for e in entry.events)
                self._journaled[user_id].update((e.id, (e, number)) for e in entry.events)
                same_answer = True
            else:
                context = await self.inner.context(user_id, entry.query, entry.budget)
                same_answer = context == entry.context
                if entry.task is not None:
                    self._recalls[entry.task] = entry
        digest = await self.inner.state_digest(user_id)
        if same_answer and (entry.digest is None or digest == entry.digest):
            return
        asked = [c for c in calls if not c.cache_hit and c.is_model_call]
        differs = (
            f"the {self.inner.name} memory of user {user_id!r} rebuilt from this journal differs from the one the run "
            f"had after this {entry.op}, so results resumed on it would differ: "
        )
        clock = "; it read the clock more often than the first time" if tape.overrun else ""
        if asked:
            why = (
                f"{len(asked)} of the {len(calls)} model calls of the rebuild were not answered by the response "
                f"cache, which holds the first answers{clock}. Resume with the run's response cache, or choose a new "
                "--out folder"
            )
        else:
            why = (
                "fed the same events with the same clock readings and "
                + (f"all {len(calls)} model calls answered by the response cache" if calls else "no model call")
                + f", the backend holds another state{clock}: its state is not deterministic (a time read with time.time() "
                "or datetime.now() instead of `self.now()`, a random number, a process id, a set's order). Read "
                f"times through `self.now()`; `atelier check memory {self.inner.name}` checks that its state rebuilds "
                "exactly"
            )
        raise MemoryRebuildError(differs + why, file=self.path, line=number)

    # ------------------------------------------------------------------ the protocol

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            await self._ready(user_id)
            seen = self._seen[user_id]
            fresh: dict[str, HistoryEvent] = {}
            journaled = self._journaled.get(user_id, {})
            for event in events:  # the first of each id not seen yet, in the order given
                if event.id not in seen:
                    fresh.setdefault(event.id, event)
                elif event.id in journaled and journaled[event.id][0] != event:
                    raise self._changed(user_id, event, *journaled[event.id])
            new = list(fresh.values())
            if not new:
                return
            tape = ClockTape()
            with on_tape(tape):
                await self.inner.ingest(user_id, new)
            digest = await self.inner.state_digest(user_id)
            self._append(IngestEntry(user_id=user_id, events=new, clock=tape.readings, digest=digest))
            seen.update(e.id for e in new)

    def _changed(self, user_id: str, event: HistoryEvent, recorded: HistoryEvent, line: int) -> MemoryRebuildError:
        """The error of an event the run's cases now tell otherwise than when it was ingested."""
        before, now = told_apart(recorded, event)
        return MemoryRebuildError(
            f"the event {event.id!r} of user {user_id!r} is {now} in the cases this run loaded, but the run's memory "
            f"ingested it as {before}: the cases changed since the run began, and its memory would answer from "
            "the old event. Resume with the cases the run began with, or choose a new --out folder",
            file=self.path,
            line=line,
        )

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        if not self.inner.recall_changes_state:
            async with self.user_lock(user_id):
                await self._ready(user_id)
            return checked_context(await self.inner.context(user_id, query, budget), self.inner.name)
        task = graph_task()
        async with self.user_lock(user_id):
            await self._ready(user_id)
            query = as_query(query)
            done = self._recalls.get(task) if task is not None else None
            if done is not None and (done.query, done.budget) == (query, budget):  # asked again: a kill lost
                return done.context.model_copy(deep=True)  # the step's checkpoint, not its search
            tape = ClockTape()
            with on_tape(tape):
                context = checked_context(await self.inner.context(user_id, query, budget), self.inner.name)
            digest = await self.inner.state_digest(user_id)
            entry = RecallEntry(
                user_id=user_id,
                task=task,
                query=query,
                budget=budget,
                context=context,
                clock=tape.readings,
                digest=digest,
            )
            self._append(entry)
            if task is not None:
                self._recalls[task] = entry
            return context

    async def state_digest(self, user_id: str) -> str | None:
        async with self.user_lock(user_id):
            await self._ready(user_id)
            return await self.inner.state_digest(user_id)

    async def aclose(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        await self.inner.aclose()


def journaled(backend: MemoryBackend) -> MemoryBackend:
    """`backend` journaled in its store folder when a later process would need it (see the module
    docstring); as it is otherwise (no store folder, a store that persists, nothing kept)."""
    if backend.env.store_dir is None or not needs_journal(backend):
        return backend
    return JournaledMemory(backend, Path(backend.env.store_dir) / JOURNAL_FILE)
