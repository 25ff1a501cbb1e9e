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
from typing import Iterator


def settle_heap() -> None:
    """Collect, then exempt every object alive now from later collections: for a process that ends
    when its episodes do (a cluster worker)."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Every object alive at the start exempt from collections until the block ends, when they are
    handed back to the collector (garbage among them, or made of them meanwhile, is collected then):
    around the episodes of a runner or a benchmark. Freezing is O(1); no collection runs first."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
