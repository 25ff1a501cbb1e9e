"""Token counting and packing history into a token budget."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import NamedTuple

from atelier.benchmarks.case import ExplicitPersona, HistoryEvent
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.memory.base import ContextShare


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


class EventsPacked(NamedTuple):
    """History events packed for a prompt with the explicit persona first and whole (`pack_events`)."""

    text: str
    ids: list[str]
    tokens: int
    budget: int
    offered: int  # events offered, the persona included
    cut: int  # history events left out by the budget (never the persona)
    offered_tokens: int  # what every offered event takes, joined as the context joins them
    persona_tokens: int  # the explicit persona's tokens (0: none offered)

    def degraded(self, step: str) -> list[Degradation]:
        """A `memory_budget_cut` counting the history events the budget left out; when the persona
        alone exceeds the budget, the detail says it was kept whole, over the budget."""
        over = self.persona_tokens > self.budget
        if not self.cut and not over:
            return []
        if over:  # said even with no history to leave out (setting `persona`): the context is over its budget
            detail = (
                f"the explicit persona alone ({self.persona_tokens} tokens) exceeds the {self.budget}-token budget: "
                "kept whole, over the budget"
            ) + (f"; all {self.cut} history events left out" if self.cut else "")
            return [degradation("memory_budget_cut", step, detail, count=max(self.cut, 1))]
        history = self.offered - (1 if self.persona_tokens else 0)
        detail = f"{self.cut} of {history} history events left out by the {self.budget}-token budget"
        if self.persona_tokens:
            detail += f" (the explicit persona, kept whole and first, took {self.persona_tokens} of it)"
        return [degradation("memory_budget_cut", step, detail, count=self.cut)]

    def share(self) -> ContextShare:
        return ContextShare(
            budget_tokens=self.budget,
            events_offered=self.offered,
            events_kept=len(self.ids),
            tokens_offered=self.offered_tokens,
            tokens_kept=self.tokens,
            persona_tokens=self.persona_tokens,
        )


def pack_events(events: Sequence[HistoryEvent], budget: int) -> EventsPacked:
    """History events as `[id] (date) kind: text` lines within `budget` tokens, in the order given,
    except the user's explicit persona (the last one given, as `persona+context` exposes it): it
    comes first, whole, and its tokens count against the budget; the other events fill what is
    left. A persona larger than the whole budget is still kept whole (the context is then over the
    budget, and every history event is left out and counted): a persona is never cut."""
    personas = [e for e in events if isinstance(e, ExplicitPersona)]
    persona = personas[-1] if personas else None
    history = [e for e in events if not isinstance(e, ExplicitPersona)]
    rendered = [(e.id, render_event(e)) for e in history]
    offered_text = "\n".join(([render_event(persona)] if persona else []) + [text for _, text in rendered])
    offered_tokens = count_tokens(offered_text) if offered_text else 0
    if persona is None:
        packed = pack(rendered, budget)
        return EventsPacked(
            packed.text, packed.ids, packed.tokens, budget, len(rendered), packed.cut, offered_tokens, 0
        )
    head = render_event(persona)
    persona_tokens = count_tokens(head)
    left = budget - persona_tokens - 1  # the newline after it
    packed = pack(rendered, left) if left > 0 else Packed("", [], 0, len(rendered), len(rendered))
    if len(packed.ids) == 1 and packed.text != rendered[0][1]:
        # `pack` cuts a first item short rather than return nothing; next to a persona, it is left out
        packed = Packed("", [], 0, len(rendered), len(rendered))
    text = f"{head}\n{packed.text}" if packed.ids else head
    return EventsPacked(
        text,
        [persona.id, *packed.ids],
        count_tokens(text),
        budget,
        len(rendered) + 1,
        packed.cut,
        offered_tokens,
        persona_tokens,
    )
