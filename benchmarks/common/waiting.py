"""What a run is waiting for while no episode finishes: a local model loading, a memory opening its
store and embedder, the sandbox web indexing its corpus. The run's progress bar says it, so a bar
that sits at 0/N for seconds says why.

A run owns one `Waits` and sets it for its episodes (`watching`); code that starts something slow
says so with `waiting_for("...")`, which is a no-op outside a run. Both go through a context
variable, which asyncio tasks and `asyncio.to_thread` inherit, so a node several calls deep needs
no handle passed down.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections.abc import Iterator


class Waits:
    """The slow starts under way in a run, each with when it began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._open: dict[int, tuple[str, float]] = {}

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        with self._lock:
            key = next(self._ids)
            self._open[key] = (what, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._open.pop(key, None)

    def now(self) -> str | None:
        """What has been waited for longest, with for how long (`the local model ... (12 s)`), and how
        many other waits there are; None when nothing is waited for."""
        with self._lock:
            waits = sorted(self._open.values(), key=lambda w: w[1])
        if not waits:
            return None
        what, since = waits[0]
        others = len({w for w, _ in waits}) - 1
        return f"{what} ({time.monotonic() - since:.0f} s)" + (f" and {others} more" if others > 0 else "")


_current: contextvars.ContextVar[Waits | None] = contextvars.ContextVar("atelier_waits", default=None)


@contextlib.contextmanager
def watching(waits: Waits) -> Iterator[Waits]:
    """Report the waits begun inside this block (tasks and threads it starts included) to `waits`."""
    token = _current.set(waits)
    try:
        yield waits
    finally:
        _current.reset(token)


@contextlib.contextmanager
def waiting_for(what: str) -> Iterator[None]:
    """Say, for the run's progress, that this block waits for `what` (a no-op outside a run)."""
    waits = _current.get()
    if waits is None:
        yield
        return
    with waits.waiting(what):
        yield
