"""Concurrent calls that stand or fall together."""

from __future__ import annotations

import asyncio
import warnings
from typing import Awaitable, Iterable, TypeVar

T = TypeVar("T")

# litellm's acompletion builds the provider coroutine in a worker thread; a call cancelled while
# that thread runs leaves the coroutine unstarted (no request was sent) and Python warns when it is
# collected. Harmless, and noise on a command's stderr.
warnings.filterwarnings("ignore", message=r"coroutine '.*acompletion' was never awaited", category=RuntimeWarning)


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
