"""History rendered for an LLM prompt: `[id] (date) kind: text` lines within a token budget.

Prompts show event ids so the model can cite the events it used; backends then keep only the
cited ids that are real (`UserEvents.known`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.memory.budget import count_tokens, pack_events, render_event


@dataclass(frozen=True)
class HistoryText:
    text: str
    event_ids: list[str]
    cut: int = 0  # events left out by the budget

    def degraded(self, step: str, reader: str, budget: int) -> list[Degradation]:
        """A `memory_budget_cut` when the budget kept events from `reader` (a profiler, a judge)."""
        if not self.cut:
            return []
        return [
            degradation(
                "memory_budget_cut",
                step,
                f"{self.cut} of {self.cut + len(self.event_ids)} history "
                f"events not read by {reader} ({budget}-token budget)",
                count=self.cut,
            )
        ]


def history_text(events: Sequence[HistoryEvent], budget_tokens: int) -> HistoryText:
    """The events in the order given, as many as fit in the budget (the first one always, cut);
    an explicit persona among them first and whole, counted in the budget (`pack_events`)."""
    packed = pack_events(events, budget_tokens)
    return HistoryText(packed.text, packed.ids, packed.cut)


def history_chunks(events: Sequence[HistoryEvent], chunk_tokens: int) -> list[HistoryText]:
    """All events, in order, split into consecutive chunks of at most `chunk_tokens` each.

    An event longer than a whole chunk gets a chunk of its own, cut to the chunk size.
    """
    chunks: list[HistoryText] = []
    lines: list[str] = []
    ids: list[str] = []
    used = 0
    for event in events:
        line = render_event(event)
        cost = count_tokens(line) + 1
        if lines and used + cost > chunk_tokens:
            chunks.append(HistoryText("\n".join(lines), ids))
            lines, ids, used = [], [], 0
        if cost > chunk_tokens:
            chunks.append(history_text([event], chunk_tokens))
            continue
        lines.append(line)
        ids.append(event.id)
        used += cost
    if lines:
        chunks.append(HistoryText("\n".join(lines), ids))
    return chunks
