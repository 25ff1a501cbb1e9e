"""The web cache: every search answer and fetched response, stored content-addressed with its request.

Layout under the cache root:

    records/<k[:2]>/<k>.json    k = sha256 of the canonical request (kind, provider or reader, query
                                or URL, params); the record holds the request, when it was recorded
                                and the response (search results, or the HTTP response's metadata)
    blobs/<h[:2]>/<h>           response bodies, h = sha256 of the bytes

Modes: `live` neither reads nor writes; `record` answers from the cache when it can and records
every miss (the first answer to a request is frozen, so a rerun sees the same web); `replay`
answers only from the cache and raises ReplayMiss otherwise — it never goes to the network.
Answers that are the web's (any HTTP status, any body) are recorded; transport failures
(timeouts, refused connections) are not, so a flaky moment is not frozen into every later run.
Identical requests made at the same time share one live call (parallel researchers often search
the same thing). Answers read from disk are kept in memory (the most recent, up to 64 MB of
bodies), so a run that reads the same page in many episodes parses its record and hashes its
body once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cachetools import LRUCache
from pydantic import BaseModel

from atelier.benchmarks.common.atomic_files import write_atomically, write_if_absent
from atelier.benchmarks.common.errors import DataError
from atelier.tools.config import CacheMode
from atelier.tools.errors import ReplayMiss

RequestKind = Literal["search", "fetch"]


class CacheRecord(BaseModel):
    key: str
    kind: RequestKind
    request: dict[str, Any]
    recorded_at: datetime
    response: dict[str, Any]
    body_sha256: str | None = None


class CachedAnswer(BaseModel):
    record: CacheRecord
    body: bytes = b""
    from_cache: bool


LiveCall = Callable[[], Awaitable[tuple[dict[str, Any], bytes | None]]]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(request: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class WebCache:
    def __init__(
        self, root: Path, mode: CacheMode, *, memory_bytes: int = 64 * 2**20, copy_to: Path | None = None
    ) -> None:
        """`copy_to`: a second cache folder every answer given is copied into (once), so a run whose
        cache lives elsewhere — a replay of another run's record, a shared cache — keeps a complete
        record of its own, which can itself be replayed."""
        self.root = Path(root)
        self._root = os.fspath(self.root)  # file names are built as strings: pathlib's joins cost more than a read
        self.mode = mode
        self.copy = WebCache(copy_to, "record") if copy_to is not None and Path(copy_to) != self.root else None
        self._copied: set[str] = set()
        self._in_flight: dict[str, asyncio.Future[CachedAnswer]] = {}
        # the answers read last, least recently used dropped first once their bodies pass memory_bytes
        self._recent: LRUCache[str, CachedAnswer] = LRUCache(maxsize=memory_bytes, getsizeof=lambda a: len(a.body))

    def _record_path(self, key: str) -> str:
        return f"{self._root}/records/{key[:2]}/{key}.json"

    def _blob_path(self, digest: str) -> str:
        return f"{self._root}/blobs/{digest[:2]}/{digest}"

    @staticmethod
    def _read_record(path: str | Path) -> CacheRecord:
        """The record in file `path` (FileNotFoundError when there is none)."""
        with open(path, "rb") as file:
            data = file.read()
        try:
            return CacheRecord.model_validate_json(data)
        except ValueError as exc:
            raise DataError(f"corrupted web cache record: {exc}", file=path) from None

    def load(self, key: str) -> CacheRecord | None:
        try:
            return self._read_record(self._record_path(key))
        except (FileNotFoundError, NotADirectoryError):  # nothing recorded under this key
            return None

    def body(self, record: CacheRecord) -> bytes:
        if record.body_sha256 is None:
            return b""
        path = self._blob_path(record.body_sha256)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            raise DataError("web cache body missing for record " + record.key, file=path) from None
        if hashlib.sha256(data).hexdigest() != record.body_sha256:
            raise DataError("web cache body does not match its sha256", file=path)
        return data

    def store(
        self, kind: RequestKind, request: dict[str, Any], response: dict[str, Any], body: bytes | None
    ) -> CacheRecord:
        digest = None
        if body is not None:
            digest = hashlib.sha256(body).hexdigest()
            write_if_absent(self._blob_path(digest), body)
        record = CacheRecord(
            key=request_key(request),
            kind=kind,
            request=request,
            recorded_at=datetime.now(UTC),
            response=response,
            body_sha256=digest,
        )
        write_atomically(self._record_path(record.key), record.model_dump_json(indent=1))
        return record

    def keep(self, answer: CachedAnswer) -> None:
        """Write `answer`'s record and body here unless they already are (the copy of another cache's)."""
        record = answer.record
        if record.body_sha256 is not None:
            write_if_absent(self._blob_path(record.body_sha256), answer.body)
        write_if_absent(self._record_path(record.key), record.model_dump_json(indent=1))

    async def _copied_out(self, answer: CachedAnswer) -> CachedAnswer:
        if self.copy is not None and answer.record.key not in self._copied:
            self._copied.add(answer.record.key)
            await asyncio.to_thread(self.copy.keep, answer)  # disk writes stay off the event loop
        return answer

    def records(self) -> Iterator[CacheRecord]:
        """Every recorded request, e.g. to list what a run searched and fetched."""
        for path in sorted((self.root / "records").glob("*/*.json")):
            yield self._read_record(path)

    async def answer(
        self, kind: RequestKind, request: dict[str, Any], live: LiveCall, *, key: str | None = None
    ) -> CachedAnswer:
        """The answer to `request` according to the mode; `live` is awaited only on a permitted miss.
        `key`: `request_key(request)`, when the caller has it already."""
        key = key or request_key(request)
        if self.mode != "live":
            known = self._recent.get(key)
            if known is not None:
                return await self._copied_out(known)
            record = self.load(key)
            if record is not None:
                known = CachedAnswer(record=record, body=self.body(record), from_cache=True)
                if len(known.body) <= self._recent.maxsize:  # a bigger body is read from disk each time
                    self._recent[key] = known
                return await self._copied_out(known)
            if self.mode == "replay":
                raise ReplayMiss(
                    f"replay: no recorded {kind} for {canonical_json(request)} in {self.root} (key {key[:16]})"
                )
        running = self._in_flight.get(key)
        if running is None:
            running = asyncio.ensure_future(self._go_live(kind, key, request, live))
            self._in_flight[key] = running
            running.add_done_callback(lambda _: self._in_flight.pop(key, None))
        # shielded: one caller giving up must not cancel the call the others are waiting for
        return await asyncio.shield(running)

    async def _go_live(self, kind: RequestKind, key: str, request: dict[str, Any], live: LiveCall) -> CachedAnswer:
        response, body = await live()
        if self.mode == "record":  # written off the event loop: a server may refuse blocking calls on it
            record = await asyncio.to_thread(self.store, kind, request, response, body)
        else:
            record = CacheRecord(
                key=key,
                kind=kind,
                request=request,
                recorded_at=datetime.now(UTC),
                response=response,
                body_sha256=hashlib.sha256(body).hexdigest() if body is not None else None,
            )
        return await self._copied_out(CachedAnswer(record=record, body=body or b"", from_cache=False))
