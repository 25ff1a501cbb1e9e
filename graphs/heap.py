"""The process's heap, settled while episodes run.

Once litellm, LangGraph and the pipelines are imported and the graph compiled, a process holds
~470 k objects that live as long as it does. Python's collector still walks all of them on every
full collection, which the episodes' allocations trigger every few hundred episodes: 100–250 ms
with the event loop stopped, each time (one landed in a 2 s, 250-episode `atelier bench runner`
run, a tenth of its wall time). Objects moved to the permanent generation (`gc.freeze`) are not walked,
so full collections then cost what the episodes allocated.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# Freezing is process-wide, so blocks that overlap (two runs in one process, a benchmark inside a
# settled worker) share it: the heap is handed back when the last one ends, never under another.
_holders = 0
_lock = threading.Lock()


def settle_heap() -> None:
    """Collect, then exempt every object alive now from later collections: for a process that ends
    when its episodes do (a cluster worker). It holds the heap settled for good."""
    global _holders
    with _lock:
        _holders += 1
        gc.collect()
        gc.freeze()


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Every object alive at the start exempt from collections until the block ends, when they are
    handed back to the collector (garbage among them, or made of them meanwhile, is collected then):
    around the episodes of a runner or a benchmark. Freezing is O(1); no collection runs first.
    Blocks may overlap or nest; the last to end hands the heap back."""
    global _holders
    with _lock:
        _holders += 1
        gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.unfreeze()
