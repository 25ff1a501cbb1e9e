"""Concurrent calls that stand or fall together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def gather_or_cancel(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Like `asyncio.gather`, but the first failure cancels the calls still running (so a failed
    user's other model calls neither go on spending nor log a stray "exception never retrieved")
    and is raised as itself, not wrapped in an ExceptionGroup."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
