"""Where a run's graphs persist: the run folder's `checkpoints.sqlite` (LangGraph's SQLite saver).

LangGraph's SQLite saver writes the whole state into every checkpoint of every (sub)graph step, so
one episode's recalled memory text or response would be stored in a dozen rows. `RunSerializer`
stores each large state value once per run instead: a value of `_KEEP_APART` bytes or more (a
channel value in a checkpoint, or a pending write) goes, zlib-compressed, into the table
`checkpoint_values` under the sha256 of its bytes, and the checkpoint holds a reference to it.
What stays inline (channel versions, small values) is compressed only from `_COMPRESS_FROM` bytes:
a step's checkpoint is mostly 1-2 KB, and deflating it cost 40-80 µs per step in a running graph
(where zlib's state is cold) to save about 1 KB of disk. Reading a checkpoint back (resume,
`atelier trace`) puts the values back in place; checkpoints written by earlier versions (without
references, or compressed from 512 bytes) load as they are.

No key reaches the file: every serialized value and checkpoint metadata pass through the run's
redactor (`benchmarks.common.redaction`) before they are written or compressed — the error a failed node
leaves in its pending writes may quote the key a provider refused.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import shutil
import sqlite3
import time
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cachetools import LRUCache
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.constants import START

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.redaction import Redactor, active_redactor
from atelier.graphs.contract import CHECKPOINTS
from atelier.graphs.serde import serializer

_KEEP_APART = 512  # bytes: smaller values stay inline (a reference would save nothing)
_COMPRESS_FROM = 2048  # bytes: a smaller checkpoint or pending write is stored as it is
_REF = "__atelier_value__"  # the key of a reference: {_REF: sha256}, plain data to the serializer
_SUFFIX = "+zlib"
_MEMO_VERSIONS = 1024  # channel versions remembered (then forgotten at once: a dict is cheaper than an LRU)


def _small(value: Any) -> bool:
    """Whether `value` is small for sure, without serializing it (most channel values of a step)."""
    return (
        value is None
        or isinstance(value, (bool, int, float))
        or (isinstance(value, str) and len(value) < _KEEP_APART // 4)
    )


class RunSerializer(SerializerProtocol):
    """Wraps a LangGraph serializer (`graphs.serde.serializer()`): large state values are stored once
    in `conn`'s `checkpoint_values` table (see the module docstring), the rest compressed inline.
    `redactor` (default: the run's) blanks keys out of every value written."""

    def __init__(
        self, conn: sqlite3.Connection, serde: SerializerProtocol | None = None, redactor: Redactor | None = None
    ) -> None:
        self.conn = conn
        self.serde = serde or serializer()
        self.redactor = redactor if redactor is not None else active_redactor()
        self._stored: set[str] = set()  # values in the table for good (committed)
        self._uncommitted: set[str] = set()  # values inserted in the open transaction
        self._loaded: LRUCache[str, tuple[str, bytes]] = LRUCache(maxsize=256)
        # (channel, version) -> (the value, what `_apart` made of it): every checkpoint holds every
        # channel, and a channel whose version did not move holds the same object (LangGraph's own
        # savers store one blob per channel version), so it is not serialized again
        self._by_version: dict[tuple[str, Any], tuple[Any, Any]] = {}

    def setup(self) -> None:
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS checkpoint_values "
            "(key TEXT NOT NULL UNIQUE, type TEXT NOT NULL, value BLOB NOT NULL)"
        )  # appended in rowid order

    # ------------------------------------------------------------------ writing

    def _apart(self, value: Any) -> Any:
        """`value`, or a reference to it once it is in the table."""
        if _small(value):
            return value  # small for sure: not serialized twice (most channel values of a step)
        kind, data = self.serde.dumps_typed(value)
        if len(data) < _KEEP_APART:
            return value
        data = self.redactor.redact_bytes(data)
        key = hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()
        if key not in self._stored and key not in self._uncommitted:
            self.conn.execute(
                "INSERT OR IGNORE INTO checkpoint_values (key, type, value) VALUES (?, ?, ?)",
                (key, kind, zlib.compress(data)),
            )
            self._uncommitted.add(key)
        return {_REF: key}

    def committed(self) -> None:
        """The open transaction is on disk: its values are stored for good."""
        self._stored |= self._uncommitted
        self._uncommitted.clear()

    def rolled_back(self) -> None:
        """The open transaction was undone (a full disk makes SQLite roll it back): its values are not
        in the table, and a later checkpoint that refers to one must insert it again."""
        self._uncommitted.clear()
        self._by_version = {}

    def _channel_apart(self, channel: str, version: Any, value: Any) -> Any:
        """`_apart(value)` for a checkpoint's channel at `version`, made once per version."""
        if _small(value):
            return value
        if version is None:
            return self._apart(value)
        known = self._by_version.get((channel, version))
        if known is not None and known[0] is value:
            return known[1]
        apart = self._apart(value)
        if len(self._by_version) >= _MEMO_VERSIONS:
            self._by_version = {}
        self._by_version[(channel, version)] = (value, apart)
        return apart

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, dict) and isinstance(obj.get("channel_values"), dict):  # a checkpoint
            versions = obj.get("channel_versions") or {}
            values = {}
            for k, v in obj["channel_values"].items():
                try:
                    values[k] = self._channel_apart(k, versions.get(k), v)
                except TypeError as exc:
                    raise unwritable(exc, *self._culprit(k, v)) from None
            obj = {**obj, "channel_values": values}
            kind, data = self.serde.dumps_typed(obj)
        else:  # a pending write's value
            try:
                obj = self._apart(obj)
                kind, data = self.serde.dumps_typed(obj)
            except TypeError as exc:
                raise unwritable(exc, None, obj) from None
        data = self.redactor.redact_bytes(data)  # same length: the serialization stays readable
        return (kind + _SUFFIX, zlib.compress(data)) if len(data) >= _COMPRESS_FROM else (kind, data)

    def _culprit(self, channel: str, value: Any) -> tuple[str, Any, bool]:
        """The state key, the value and whether it came in a graph's input, of a channel's value the
        serializer could not write: a graph's input (LangGraph's `__start__` channel) is a dict of
        state keys, of which the first one that cannot be written is named."""
        if channel == START and isinstance(value, dict):
            for key, item in value.items():
                try:
                    self.serde.dumps_typed(item)
                except TypeError:
                    return str(key), item, True
        return channel, value, False

    # ------------------------------------------------------------------ reading

    def _back(self, value: Any) -> Any:
        if not (isinstance(value, dict) and len(value) == 1 and _REF in value):
            return value
        key = value[_REF]
        if key not in self._loaded:  # the bytes, not the object: each checkpoint gets its own copy to mutate
            row = self.conn.execute("SELECT type, value FROM checkpoint_values WHERE key = ?", (key,)).fetchone()
            if row is None:
                raise DataError(f"checkpoint value {key} is missing from checkpoint_values")
            self._loaded[key] = (row[0], zlib.decompress(row[1]))
        return self.serde.loads_typed(self._loaded[key])

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        if kind.endswith(_SUFFIX):
            kind, blob = kind.removesuffix(_SUFFIX), zlib.decompress(blob)
        obj = self.serde.loads_typed((kind, blob))
        if isinstance(obj, dict) and isinstance(obj.get("channel_values"), dict):
            return {**obj, "channel_values": {k: self._back(v) for k, v in obj["channel_values"].items()}}
        return self._back(obj)


def unwritable(exc: TypeError, key: str | None, value: Any, in_input: bool = False) -> ContractBroken:
    """A state value the serializer cannot write (`TypeError: Type is not msgpack serializable`): the
    pipeline contract's 'checkpointable state' broken, naming the state key (`in_input`: of a graph's
    input) and the type."""
    where = f"state key {key!r}" if key is not None else "a step's output"
    where += " of a graph's input" if in_input else ""
    return ContractBroken(
        CHECKPOINTS,
        f"{where} holds a {type(value).__name__} the run's checkpoint serializer cannot write ({exc}): keep plain "
        "data, pydantic models or dataclasses in graph state, and declare your own types (`state_types`, graphs/serde.py)",
        "checkpoint",
    )


class InlineSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with its async methods running the sync ones in the event loop's
    thread. A checkpoint write is a few compressed KB appended to a WAL file with no sync per
    commit: done inline it costs well under a millisecond, while aiosqlite's worker thread costs a
    thread switch and a fight for the GIL per statement, which dominated a run's CPU time.

    Writes are committed together, at most `commit_every_s` apart, rather than once per statement
    (an episode makes dozens): a kill loses at most that much of the running episodes' progress,
    which then resume from their previous checkpoint. `commit()` makes everything so far durable
    (the runner calls it before it records an episode as done).

    A step's pending writes (each task's output, kept so that a step cut short need not run its
    finished tasks again) wait in memory until the next commit: most are folded into the step's
    next checkpoint before then, and are dropped unwritten when it is put. What is still pending at a
    commit (a failed or interrupted step's writes) is written in that commit, so what a commit makes
    durable is what it made durable before, less writes no resume could use; reading a thread's
    checkpoints writes its pending writes first."""

    commit_every_s = 0.25

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._committed = time.monotonic()
        # (thread, namespace, checkpoint id) -> the put_writes calls made for it, in order
        self._pending: dict[tuple[str, str, str], list[tuple[Sequence[tuple[str, Any]], str, str]]] = {}

    @contextlib.contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        with self.lock:
            self.setup()
            cur = self.conn.cursor()
            try:
                yield cur
            except sqlite3.Error:
                if not self.conn.in_transaction:  # SQLite undid the transaction (a full disk, an I/O error)
                    self._rolled_back()
                raise
            finally:
                if transaction and time.monotonic() - self._committed >= self.commit_every_s:
                    self._commit(cur)
                cur.close()

    def _write_pending(self, cur: sqlite3.Cursor, thread_id: str | None = None) -> None:
        """Write the pending writes held in memory (of `thread_id`, or all), as SqliteSaver.put_writes
        writes them: a call whose writes are all special (errors, interrupts) replaces, others do not."""
        for key in [k for k in self._pending if thread_id is None or k[0] == thread_id]:
            thread, ns, checkpoint_id = key
            for writes, task_id, task_path in self._pending[key]:
                verb = "REPLACE" if all(w[0] in WRITES_IDX_MAP for w in writes) else "IGNORE"
                rows = []
                for idx, (channel, value) in enumerate(writes):
                    try:
                        typed = tuple(self.serde.dumps_typed(value))
                    except ContractBroken:
                        # a value no checkpoint can hold: its episode failed on it, by the clause, when
                        # its step was checkpointed; written, it would stop the commit of every episode
                        continue
                    rows.append(
                        (thread, ns, checkpoint_id, task_id, task_path, WRITES_IDX_MAP.get(channel, idx), channel)
                        + typed
                    )
                cur.executemany(
                    f"INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
                    "idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            del self._pending[key]  # written (a failure above leaves the rest to the next commit)

    def _flush_thread(self, config: RunnableConfig | None) -> None:
        """Before a read: the pending writes of the thread read (of all threads without one) go to the table."""
        thread = (config or {}).get("configurable", {}).get("thread_id")
        thread_id = None if thread is None else str(thread)
        with self.lock:
            held = any(thread_id is None or k[0] == thread_id for k in self._pending)
        if held:
            with self.cursor() as cur:
                self._write_pending(cur, thread_id)

    def _commit(self, cur: sqlite3.Cursor | None = None) -> None:
        try:
            if self._pending:
                if cur is None:
                    with contextlib.closing(self.conn.cursor()) as own:
                        self._write_pending(own)
                else:
                    self._write_pending(cur)
            self.conn.commit()
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                self.conn.rollback()
            self._rolled_back()
            raise
        if isinstance(self.serde, RunSerializer):
            self.serde.committed()
        self._committed = time.monotonic()

    def _rolled_back(self) -> None:
        if isinstance(self.serde, RunSerializer):
            self.serde.rolled_back()

    def commit(self) -> None:
        with self.lock:
            self._commit()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        redactor = getattr(self.serde, "redactor", None)  # the metadata is written as JSON, past the serializer
        if redactor:
            metadata = redactor.redact_data(metadata)
        saved = super().put(config, checkpoint, metadata, new_versions)
        conf = config["configurable"]
        parent = conf.get("checkpoint_id")
        if parent:  # the parent's step is done: its writes are folded into this checkpoint
            with self.lock:
                self._pending.pop((str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), str(parent)), None)
        return saved

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        conf = config["configurable"]
        key = (str(conf["thread_id"]), str(conf["checkpoint_ns"]), str(conf["checkpoint_id"]))
        with self.lock:
            self._pending.setdefault(key, []).append((tuple(writes), task_id, task_path))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._flush_thread(config)
        return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._flush_thread(config)
        return super().list(config, filter=filter, before=before, limit=limit)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self._flush_thread(config)
        return super().get_delta_channel_history(config=config, channels=channels)

    def _forget_pending(self, thread_id: str) -> None:
        with self.lock:
            for key in [k for k in self._pending if k[0] == thread_id]:
                del self._pending[key]

    def delete_thread(self, thread_id: str) -> None:
        self._forget_pending(str(thread_id))
        super().delete_thread(thread_id)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    def drop_pending_writes(self, thread_id: str) -> None:
        """Forget a finished episode's pending writes: each is a task's output, already folded into
        the next checkpoint, and only an unfinished step would need it again. The checkpoints (the
        trace) stay; the freed pages are reused by the episodes that follow."""
        self._forget_pending(thread_id)
        with self.cursor() as cur:
            cur.execute("DELETE FROM writes WHERE thread_id = ?", (thread_id,))
        self.commit()


def out_of_space(path: Path, exc: BaseException) -> bool:
    """Whether `exc` (an SQLite or OS error writing under `path`) came from a full disk."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    said = str(exc).lower()
    if "disk is full" in said:
        return True
    if "disk i/o error" in said:  # SQLite's word for a write the file system refused
        folder = path if path.is_dir() else path.parent
        with contextlib.suppress(OSError):
            return shutil.disk_usage(folder).free < 1 << 20
    return False


def no_space(path: Path, exc: BaseException) -> DataError:
    return DataError(
        f"no space left on the disk of the run folder ({exc}); free some, then run the same command again "
        "to go on where it stopped",
        file=path,
    )


def unreadable(path: Path, exc: BaseException) -> DataError:
    """The error of a checkpoint database that cannot be read (truncated, not SQLite, damaged)."""
    if out_of_space(path, exc):
        return no_space(path, exc)
    return DataError(
        f"not a readable checkpoint database ({exc}); delete it to go on (episodes that were "
        "cut short then start again from their beginning)",
        file=path,
    )


def connect_checkpoints(path: Path) -> sqlite3.Connection:
    """A connection to a checkpoint database (created when missing); a folder in its place, or a
    file SQLite cannot open, is a DataError naming it."""
    if path.is_dir():
        raise DataError("is a folder, not a checkpoint database: move it away to go on", file=path)
    try:
        no_follow.refuse_links(*no_follow.sqlite_files(path))  # SQLite would open a link as the database
        return sqlite3.connect(str(path), check_same_thread=False)
    except sqlite3.DatabaseError as exc:
        raise unreadable(path, exc) from None


@contextlib.asynccontextmanager
async def run_checkpointer(folder: str | Path, *, redactor: Redactor | None = None) -> AsyncIterator[InlineSqliteSaver]:
    """The checkpointer of a run folder (created when missing); a file that is not a checkpoint
    database is a DataError naming it, before any graph runs. `redactor`: default, the run's."""
    path = Path(folder) / "checkpoints.sqlite"
    with contextlib.closing(connect_checkpoints(path)) as conn:
        serde = RunSerializer(conn, redactor=redactor)
        saver = InlineSqliteSaver(conn, serde=serde)
        try:
            # WAL without a sync per commit: a killed process loses nothing (the OS holds the log), and
            # a commit per checkpoint no longer waits on the disk; only a power cut could cost the last steps
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file only: pages freed can be given back
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            serde.setup()
            saver.setup()
        except sqlite3.DatabaseError as exc:
            raise unreadable(path, exc) from None
        try:
            yield saver
        finally:
            saver.commit()
            with saver.lock:  # give back the pages the finished episodes' writes left free
                conn.executescript("PRAGMA incremental_vacuum;")  # (stepped to the end only this way)
