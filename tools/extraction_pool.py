"""Main-text extraction in worker processes, so fetching pages uses every core.

Extraction (trafilatura over lxml) is CPU work in Python; on threads it shares one interpreter
lock with the event loop, the HTTP client and an in-process sandbox, which caps a 2-core machine
at about 50 pages/s. Worker processes (spawned, so no lock or thread state is forked) run it in
parallel. The pool is process-wide and created on first use: it costs one interpreter start per
worker, paid once however many webs a process builds.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor

from tools.extract import ExtractedText, extract_text

_lock = threading.Lock()
_pools: dict[int, ProcessPoolExecutor] = {}


def default_workers() -> int:
    """One worker per core when there is more than one core; 0 (a thread) otherwise."""
    cores = os.cpu_count() or 1
    return cores if cores > 1 else 0


def _pool(workers: int) -> ProcessPoolExecutor:
    with _lock:
        if workers not in _pools:
            _pools[workers] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        return _pools[workers]


async def extract_text_async(body: bytes, content_type: str, url: str, workers: int) -> ExtractedText:
    """`extract_text` off the event loop: in `workers` processes, or in a thread when 0."""
    if workers <= 0:
        return await asyncio.to_thread(extract_text, body, content_type, url)
    return await asyncio.get_running_loop().run_in_executor(_pool(workers), extract_text, body, content_type, url)


@atexit.register
def _shutdown() -> None:
    with _lock:
        for pool in _pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        _pools.clear()
