"""Collecting what a block of code (and the tasks it starts) records, through a context variable."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class _Collected(list, Generic[T]):
    """A block's list; what it receives reaches an enclosing block's list too, so blocks nest (a
    cluster worker collecting an episode's calls around an episode collecting its own)."""

    def __init__(self, outer: list[T] | None) -> None:
        super().__init__()
        self._outer = outer

    def append(self, item: T) -> None:
        super().append(item)
        if self._outer is not None:
            self._outer.append(item)


@contextlib.contextmanager
def collecting(var: contextvars.ContextVar[list[T] | None]) -> Iterator[list[T]]:
    """Set `var` to a fresh list for this block; recorders append to `var.get()` when it is set."""
    items: list[T] = _Collected(var.get())
    token = var.set(items)
    try:
        yield items
    finally:
        var.reset(token)
