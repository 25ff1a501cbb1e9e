"""Where a run's graphs persist: the run folder's `checkpoints.sqlite` (LangGraph's SQLite saver).

LangGraph's SQLite saver writes the whole state into every checkpoint of every (sub)graph step,
so the recalled memory text or a response appears in many rows of one episode. Checkpoint blobs
are therefore zlib-compressed (`CompressedSerializer`): text shrinks about threefold, and reading
them back (resume, `atelier trace`) is unchanged.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from benchmarks.errors import DataError
from graphs.serde import serializer

_SUFFIX = "+zlib"
_MIN_BYTES = 512  # smaller blobs are stored as they are: compressing them saves nothing


class CompressedSerializer(SerializerProtocol):
    """Wraps a LangGraph serializer; blobs of `_MIN_BYTES` or more are zlib-compressed and their
    type tagged `+zlib`. Untagged blobs (small ones, older checkpoints) load as they are."""

    def __init__(self, serde: SerializerProtocol | None = None, level: int = 6) -> None:
        self.serde = serde or serializer()
        self.level = level

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(obj)
        if len(data) < _MIN_BYTES:
            return kind, data
        return kind + _SUFFIX, zlib.compress(data, self.level)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        if kind.endswith(_SUFFIX):
            return self.serde.loads_typed((kind.removesuffix(_SUFFIX), zlib.decompress(blob)))
        return self.serde.loads_typed(data)


class InlineSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with its async methods running the sync ones in the event loop's
    thread. A checkpoint write is a few compressed KB appended to a WAL file with no sync per
    commit: done inline it costs well under a millisecond, while aiosqlite's worker thread costs a
    thread switch and a fight for the GIL per statement, which dominated a run's CPU time."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)




@contextlib.asynccontextmanager
async def run_checkpointer(folder: str | Path) -> AsyncIterator[InlineSqliteSaver]:
    """The checkpointer of a run folder (created when missing); a file that is not a checkpoint
    database is a DataError naming it, before any graph runs."""
    path = Path(folder) / "checkpoints.sqlite"
    with contextlib.closing(sqlite3.connect(str(path), check_same_thread=False)) as conn:
        saver = InlineSqliteSaver(conn, serde=CompressedSerializer())
        try:
            # WAL without a sync per commit: a killed process loses nothing (the OS holds the log), and
            # a commit per checkpoint no longer waits on the disk; only a power cut could cost the last steps
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            saver.setup()
        except sqlite3.DatabaseError as exc:
            raise DataError(f"not a readable checkpoint database ({exc}); delete it to go on (episodes that were "
                            "cut short then start again from their beginning)", file=path) from None
        yield saver
