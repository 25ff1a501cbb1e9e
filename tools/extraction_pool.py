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
import functools
import hashlib
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from cachetools import LRUCache

from atelier.tools.extract import ExtractedText, extract_text

_lock = threading.Lock()
_pools: dict[int, ProcessPoolExecutor] = {}


@functools.cache  # os.cpu_count() reads /sys on every call (~15 µs), and a page read asks each time
def default_workers() -> int:
    """One worker per core when there is more than one core; 0 (a thread) otherwise."""
    cores = os.cpu_count() or 1
    return cores if cores > 1 else 0


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the parent is gone. A parent killed outright (a Studio server
    stopped with SIGKILL, a run killed -9) runs no atexit, and its workers would wait on the call
    queue forever."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _pool(workers: int) -> ProcessPoolExecutor:
    with _lock:
        if workers not in _pools:
            _pools[workers] = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_exit_with_parent,
                initargs=(os.getpid(),),
            )
        return _pools[workers]


def _in_pool(workers: int, body: bytes, content_type: str, url: str) -> ExtractedText:
    return _pool(workers).submit(extract_text, body, content_type, url).result()


# Extraction is a pure function of (body, content type, URL): a page read again — by another
# system or case of the same run, or replayed from the web cache — is not extracted again.
_recent: LRUCache[tuple[str, str, str], ExtractedText] = LRUCache(maxsize=512)


async def extract_text_async(body: bytes, content_type: str, url: str, workers: int) -> ExtractedText:
    """`extract_text` off the event loop: in `workers` processes, or in a thread when 0."""
    key = (hashlib.sha256(body).hexdigest(), content_type, url)
    known = _recent.get(key)
    if known is not None:
        return known
    if workers <= 0:
        extracted = await asyncio.to_thread(extract_text, body, content_type, url)
    else:  # handed to the pool from a thread: starting its processes writes to pipes, off the event loop
        extracted = await asyncio.to_thread(_in_pool, workers, body, content_type, url)
    _recent[key] = extracted
    return extracted


@atexit.register
def _shutdown() -> None:
    with _lock:
        for pool in _pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        _pools.clear()
