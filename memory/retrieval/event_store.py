"""Each user's history events, kept in memory and, given a directory, in one JSON Lines file per user.

The file lets a later backend instance on the same store (a resumed run) see what an earlier one
ingested: it is read on the first access to that user. Lines are only ever appended; a last line
torn by a killed process is cut off when the file is read.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl
from atelier.benchmarks.contract import told_apart
from atelier.benchmarks.loaders._records import validate
from atelier.memory.user_events import UserEvents


class StoredEvent(BaseModel):
    """One line of a user's event file."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    event: HistoryEvent


def user_key(user_id: str) -> str:
    """A file- and collection-name-safe key for a user id (ids may hold any character)."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:40]


class EventStore:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._events = UserEvents()
        self._by_id: dict[str, dict[str, HistoryEvent]] = {}  # lookup by id for recall
        self._lines: dict[str, dict[str, int]] = {}  # user -> event id -> its line in the user's file
        self._loaded: set[str] = set()
        self._lock = threading.Lock()
        if directory is not None:
            no_follow.make_folders(directory)

    def _path(self, user_id: str) -> Path | None:
        return self.directory / f"{user_key(user_id)}.jsonl" if self.directory else None

    def _load(self, user_id: str) -> None:
        with self._lock:
            if user_id in self._loaded:
                return
            self._loaded.add(user_id)
            path = self._path(user_id)
            if path is None or not path.exists():
                return
            # a last line torn by a killed process is cut off: its events were not all stored, and the
            # ingest that wrote them is done again by the episode that resumes
            lines = read_appended_jsonl(path, repair=True).values
            records = [validate(StoredEvent, data, file=path, line=number) for number, data in lines]
            strangers = [r.user_id for r in records if r.user_id != user_id]
            if strangers:
                raise DataError(f"holds events of user {strangers[0]!r}, expected only {user_id!r}", file=path)
            self._remember(user_id, self._events.add(user_id, [r.event for r in records]))
            at = self._lines.setdefault(user_id, {})
            for (number, _), record in zip(lines, records, strict=True):
                at.setdefault(record.event.id, number)

    def _remember(self, user_id: str, new: Sequence[HistoryEvent]) -> None:
        by_id = self._by_id.setdefault(user_id, {})
        for event in new:
            by_id[event.id] = event

    def check_unchanged(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        """A DataError if one of `events` is stored under its id as told otherwise: the cases changed
        since an earlier process of the run ingested it (a case renamed and its event edited gets past
        the run's case digests), and the store would answer from the old event."""
        self._load(user_id)
        by_id = self._by_id.get(user_id, {})
        for event in events:
            stored = by_id.get(event.id)
            if stored is not None and stored != event:
                before, now = told_apart(stored, event)
                raise DataError(
                    f"the event {event.id!r} of user {user_id!r} is {now} in the cases this run loaded, but the run's "
                    f"retrieval memory stored it as {before}: the cases changed since the run began, and the memory "
                    "would answer from the old event. Resume with the cases the run began with, or choose a new "
                    "--out folder",
                    file=self._path(user_id),
                    line=self._lines.get(user_id, {}).get(event.id),
                )

    def add(self, user_id: str, events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        """Store the events not seen before (by id) and return them, in the order given; a DataError
        for an event stored under its id as told otherwise (`check_unchanged`)."""
        self.check_unchanged(user_id, events)
        new = self._events.add(user_id, events)
        self._remember(user_id, new)
        path = self._path(user_id)
        if path is not None and new:
            lines = "".join(StoredEvent(user_id=user_id, event=e).model_dump_json() + "\n" for e in new)
            with no_follow.open_file(path, "a") as fh:
                fh.write(lines)
        return new

    def unseen(self, user_id: str, events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
        self._load(user_id)
        return self._events.unseen(user_id, events)

    def events(self, user_id: str) -> list[HistoryEvent]:
        self._load(user_id)
        return self._events.events(user_id)

    def count(self, user_id: str) -> int:
        self._load(user_id)
        return len(self._by_id.get(user_id, {}))

    def get(self, user_id: str, ids: Sequence[str]) -> list[HistoryEvent]:
        """The user's events with these ids, in the order given; unknown ids are skipped."""
        self._load(user_id)
        by_id = self._by_id.get(user_id, {})
        return [by_id[i] for i in self._events.known(user_id, ids)]
