"""Ledger tags for a backend's own steps (`ingest`, `recall`) when no graph node names them.

Inside the memory subgraph LangGraph already tags each LLM call with its node; a backend used on
its own (evaluation, benchmarks, tests) tags its calls here so the ledger reads the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from atelier.agents.models.ledger import call_tags, current_tags


@contextlib.contextmanager
def memory_step(step: str) -> Iterator[None]:
    if current_tags().get("node"):
        yield
        return
    with call_tags(node=step):
        yield
