"""A content-addressed response cache on disk: the same request never reaches a provider twice.

The key is the sha256 of everything that changes the answer (model identity, endpoint, messages,
output schema, temperature, seed, max tokens, extra provider parameters); see `request_key`.
Storage is diskcache (SQLite underneath): safe across threads and processes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def request_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path) -> None:
        import diskcache

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._store = diskcache.Cache(str(self.directory), size_limit=2**34)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._store.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._store.set(key, value)

    def discard(self, key: str) -> None:
        self._store.delete(key)

    def __len__(self) -> int:
        return len(self._store)

    def close(self) -> None:
        self._store.close()
