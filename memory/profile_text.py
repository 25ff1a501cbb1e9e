"""A profile (text blocks, each citing history events) packed into a context within the budget.

Shared by `profile`, `query_profile` and `selected` (profile form). The context's event ids are
the real events cited by the blocks that made it into the text, first, then the rest of the
events the profile was built from: all of them shaped it, the cited ones most directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from atelier.benchmarks.common.degradation import Degradation
from atelier.memory.base import UserContext
from atelier.memory.budget import pack


def profile_context(
    backend: str,
    blocks: Sequence[tuple[str, Sequence[str]]],
    built_from: Sequence[str],
    budget: int,
    degraded: Sequence[Degradation] = (),
) -> UserContext:
    """`blocks`: (text, cited ids) in order; `built_from`: the events the profile saw, most
    relevant or recent first. Cited ids outside `built_from` (invented by the model) are dropped.
    `degraded`: what already degraded on the way (history the profiler did not read)."""
    blocks = [(text, cited) for text, cited in blocks if text.strip()]
    packed = pack(((str(i), block) for i, (block, _) in enumerate(blocks)), budget)
    degraded = [*degraded, *packed.degraded("recall", "profile blocks", budget)]
    if not packed.ids:
        return UserContext(backend=backend, form="none", degraded=degraded)
    real = set(built_from)
    cited = [event_id for key in packed.ids for event_id in blocks[int(key)][1] if event_id in real]
    event_ids = list(dict.fromkeys([*cited, *built_from]))
    return UserContext(
        backend=backend, form="profile", text=packed.text, event_ids=event_ids, tokens=packed.tokens, degraded=degraded
    )
