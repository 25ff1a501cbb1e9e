"""The time a memory's state is built on, as one operation read it: recorded, and replayed.

Some backends keep time in their state (hierarchical's session heat decays with the hours since a
visit; mem0's extraction prompt names the day). A memory rebuilt later from its journal
(memory/journal.py) must see the times the original operation saw, or heat, promotions and prompts
(hence cached answers) would differ. A backend reads the time with `MemoryBackend.now()`, which
goes through the `ClockTape` of the operation in progress, if any: recording, it notes each
reading of the backend's clock; replaying, it hands the noted readings back in order.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

_tape: contextvars.ContextVar[ClockTape | None] = contextvars.ContextVar("atelier_memory_clock_tape", default=None)


class ClockTape:
    """The clock readings of one memory operation: `recording()` notes them, `replaying(readings)`
    returns them again. A replay that reads more often than the original did is off its tape: it
    reads the real clock and says so (`overrun`), and the journal's state check then tells whether
    that changed anything."""

    def __init__(self, readings: list[float] | None = None) -> None:
        self.replay = readings is not None
        self.readings: list[float] = list(readings or [])
        self._next = 0
        self.overrun = False

    def read(self, clock: Callable[[], float]) -> float:
        if not self.replay:
            now = clock()
            self.readings.append(now)
            return now
        if self._next < len(self.readings):
            self._next += 1
            return self.readings[self._next - 1]
        self.overrun = True
        return clock()


def read_clock(clock: Callable[[], float]) -> float:
    """`clock()`, through the tape of the operation in progress when there is one."""
    tape = _tape.get()
    return tape.read(clock) if tape is not None else clock()


@contextlib.contextmanager
def on_tape(tape: ClockTape) -> Iterator[ClockTape]:
    """Clock readings inside this block (and the tasks it starts) go through `tape`."""
    token = _tape.set(tape)
    try:
        yield tape
    finally:
        _tape.reset(token)
