"""Where a run's graphs persist: a run folder's checkpoints (`checkpoints.sqlite`, LangGraph's
SQLite saver) and store (`store.sqlite`: each case once, see `graphs.case_store`).

LangGraph's SQLite saver writes the whole state into every checkpoint of every (sub)graph step,
so the recalled memory text or a response appears in many rows of one episode. Checkpoint blobs
are therefore zlib-compressed (`CompressedSerializer`): text shrinks about threefold, and reading
them back (resume, `atelier trace`) is unchanged.
"""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Any, AsyncIterator

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

_SUFFIX = "+zlib"
_MIN_BYTES = 512  # smaller blobs are stored as they are: compressing them saves nothing


class CompressedSerializer(SerializerProtocol):
    """Wraps a LangGraph serializer; blobs of `_MIN_BYTES` or more are zlib-compressed and their
    type tagged `+zlib`. Untagged blobs (small ones, older checkpoints) load as they are."""

    def __init__(self, serde: SerializerProtocol | None = None, level: int = 6) -> None:
        self.serde = serde or checkpoint_serde()
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


def checkpoint_serde() -> SerializerProtocol:
    """The serializer graph state goes through (types registered once, in one place)."""
    return JsonPlusSerializer()


@contextlib.asynccontextmanager
async def run_persistence(folder: str | Path) -> AsyncIterator[tuple[Any, Any]]:
    """The checkpointer and the store of a run folder, opened together (created when missing)."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    folder = Path(folder)
    async with (aiosqlite.connect(str(folder / "checkpoints.sqlite")) as checkpoints,
                AsyncSqliteStore.from_conn_string(str(folder / "store.sqlite")) as store):
        saver = AsyncSqliteSaver(checkpoints, serde=CompressedSerializer())
        await saver.setup()
        await store.setup()
        yield saver, store
