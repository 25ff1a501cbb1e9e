"""A content-addressed response cache on disk: the same request never reaches a provider twice.

The key is the sha256 of everything that changes the answer (model identity, endpoint, messages,
output schema, temperature, seed, max tokens, extra provider parameters); see `request_key`.
Storage is diskcache (SQLite underneath): safe across threads and processes on one machine. For
a cluster, `redis://host:port/db` in place of a directory keeps one cache for every node
(`RedisResponseCache`), so a request answered on one node is never paid for again on another.

The cache is shared by every later run, so it never stores a key: an answer (or a prompt) that
quotes one is stored with it blanked by the active redactor (`benchmarks.common.redaction`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.redaction import active_redactor


def request_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path) -> None:
        import diskcache

        self.directory = Path(directory)
        no_follow.make_folders(self.directory)
        self._store = diskcache.Cache(str(self.directory), size_limit=2**34)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._store.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._store.set(key, active_redactor().redact_data(value))

    def discard(self, key: str) -> None:
        self._store.delete(key)

    def __len__(self) -> int:
        return len(self._store)

    def close(self) -> None:
        self._store.close()


class RedisResponseCache:
    """The same cache in a Redis server shared by every node of a cluster (redis-py). Entries are
    JSON under `<namespace>:<key>`; nothing expires (a response cache is a record, not a buffer)."""

    def __init__(self, url: str, namespace: str = "atelier:llm") -> None:
        import redis

        self.url = url
        self.namespace = namespace
        self._client = redis.Redis.from_url(url, socket_connect_timeout=5)

    def _name(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    def get(self, key: str) -> dict[str, Any] | None:
        raw = self._client.get(self._name(key))
        return json.loads(raw) if raw is not None else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._client.set(self._name(key), json.dumps(active_redactor().redact_data(value), ensure_ascii=False))

    def discard(self, key: str) -> None:
        self._client.delete(self._name(key))

    def __len__(self) -> int:
        return sum(1 for _ in self._client.scan_iter(match=f"{self.namespace}:*", count=1000))

    def close(self) -> None:
        self._client.close()


def is_redis_url(location: str) -> bool:
    return location.startswith(("redis://", "rediss://", "unix://"))


def open_response_cache(location: str | Path) -> ResponseCache | RedisResponseCache:
    """The response cache at `location`: a Redis URL (shared by a cluster) or a directory."""
    location = str(location)
    return RedisResponseCache(location) if is_redis_url(location) else ResponseCache(location)
