"""Token counting and packing history into a token budget."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import NamedTuple

from benchmarks.case import HistoryEvent
from benchmarks.common.degradation import Degradation, degradation


@lru_cache(maxsize=1)
def _encoding():
    spec = find_spec("litellm")
    if spec and spec.origin and "TIKTOKEN_CACHE_DIR" not in os.environ:
        # litellm ships tiktoken's cl100k file; point tiktoken at it so nothing is downloaded
        os.environ["TIKTOKEN_CACHE_DIR"] = str(Path(spec.origin).parent / "litellm_core_utils" / "tokenizers")
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def truncate_tokens(text: str, budget: int) -> str:
    tokens = _encoding().encode(text, disallowed_special=())
    return text if len(tokens) <= budget else _encoding().decode(tokens[:budget])


def render_event(event: HistoryEvent) -> str:
    """How a history event appears in a prompt: `[id] (date) kind: text`."""
    when = f" ({event.timestamp})" if event.timestamp else ""
    return f"[{event.id}]{when} {event.kind.replace('_', ' ')}: {event.render()}"


class Packed(NamedTuple):
    text: str
    ids: list[str]
    tokens: int  # the text's exact token count
    offered: int  # items offered
    cut: int  # items left out by the budget (a first item cut short to fit counts as kept)

    def degraded(self, step: str, what: str, budget: int) -> list[Degradation]:
        """A `memory_budget_cut` when the budget left items out: a context never loses history silently."""
        if not self.cut:
            return []
        return [
            degradation(
                "memory_budget_cut",
                step,
                f"{self.cut} of {self.offered} {what} left out by the {budget}-token budget",
                count=self.cut,
            )
        ]


def pack(items: Iterable[tuple[str, str]], budget: int) -> Packed:
    """Join (id, text) items in order, one per line, while they fit in `budget` tokens.

    Returns the text, the ids included, its exact token count, and how many items were offered and
    left out. If even the first item does not fit, it is truncated to the budget rather than
    returning nothing.
    """
    items = list(items)
    lines: list[str] = []
    ids: list[str] = []
    used = 0
    for item_id, text in items:
        cost = count_tokens(text) + (1 if lines else 0)  # the newline joining it
        if used + cost > budget:
            if not lines and budget > 0:
                lines.append(truncate_tokens(text, budget))
                ids.append(item_id)
            break
        lines.append(text)
        ids.append(item_id)
        used += cost
    joined = "\n".join(lines)
    while lines and count_tokens(joined) > budget:  # merges across lines can only rarely add tokens
        lines.pop()
        ids.pop()
        joined = "\n".join(lines)
    return Packed(joined, ids, count_tokens(joined) if lines else 0, len(items), len(items) - len(ids))
