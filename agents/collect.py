"""Collecting what a block of code (and the tasks it starts) records, through a context variable."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def collecting(var: contextvars.ContextVar[list[T] | None]) -> Iterator[list[T]]:
    """Set `var` to a fresh list for this block; recorders append to `var.get()` when it is set."""
    items: list[T] = []
    token = var.set(items)
    try:
        yield items
    finally:
        var.reset(token)
