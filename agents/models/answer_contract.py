"""The provider's contract: an answer the gateway hands on is one that arrived whole.

What a provider's answer must be before anything scores it, clause by clause; the gateway
(agents/models/gateway.py) holds every answer of every call to them:

- an answer that arrived whole: a streamed answer ends with its terminal event (a chunk with a
  `finish_reason`; the Responses API's `response.completed`), and a Responses (or Interactions)
  answer is done — a background one polled to its end (agents/models/grounding.py), never read
  `queued` or `in_progress`, nor ended `failed` or `cancelled`. Broken: the call fails
  (`IncompleteAnswer`: retried like a lost connection, but for an answer read still running),
  `answer_incomplete` is recorded, nothing is cached;
- not cut at the token limit (`finish_reason` length, a Responses answer `incomplete` for
  `max_output_tokens`): `answer_cut`;
- not withheld by a content filter (`finish_reason` content_filter): `answer_filtered`;
- reasoning closed before the answer: a `<think>` block that never closes is the model's partial
  reasoning, not its answer: it is taken out of the text (nothing else is left) and
  `reasoning_unclosed` is recorded.

The last three are degradations of the step that asked: the answer is used as it is, and cached
with what it broke, so a rerun that replays it records the same (`answer_breaches`). They reach
the record of whatever encloses the call (`recording_answers`): a judgment keeps those of its
judge's calls, an episode those of its system's calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from atelier.benchmarks.common.contract import ContractClause
from atelier.benchmarks.common.degradation import Degradation

PROTOCOL = "provider"
WHOLE = ContractClause(PROTOCOL, "an answer that arrived whole", "answer_incomplete")
NOT_CUT = ContractClause(PROTOCOL, "not cut at the token limit", "answer_cut")
NOT_FILTERED = ContractClause(PROTOCOL, "not withheld by a content filter", "answer_filtered")
REASONING_CLOSED = ContractClause(PROTOCOL, "reasoning closed before the answer", "reasoning_unclosed")

# finish reasons that say the answer is not all the model would have said
_CUT = {"length": NOT_CUT, "max_tokens": NOT_CUT, "content_filter": NOT_FILTERED}
_OPEN_THINKING = re.compile(r"^\s*<think>(?!.*</think>)", re.DOTALL)


class IncompleteAnswer(RuntimeError):
    """A provider answer that did not arrive whole. `retryable`: asking again may help (a stream cut
    off, an answer that ended failed), unlike reading an answer still being made."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(f"{WHOLE.label} broken: {message}")
        self.retryable = retryable


def unclosed_thinking(text: str) -> bool:
    """Whether `text` opens a `<think>` block it never closes (the answer ended inside it)."""
    return "<think>" in text[:64] and _OPEN_THINKING.match(text) is not None


def answer_breaches(
    finish_reason: str | None, text: str, where: Callable[[], str], who: str = "the provider"
) -> tuple[str, list[Degradation]]:
    """The text to hand on, and the degradations of what the answer broke of the provider contract
    (its finish reason, an unclosed reasoning block), recorded at the step `where()` names (asked
    only when something broke); `who` answered."""
    clause = _CUT.get(finish_reason or "")
    unclosed = unclosed_thinking(text)
    if clause is None and not unclosed:
        return text, []
    step = where()
    broken = []
    if clause is not None:
        broken.append(clause.broken(f"{who}'s answer ended with finish_reason {finish_reason!r}", step))
    if unclosed:
        broken.append(
            REASONING_CLOSED.broken(
                f"{who}'s answer ended inside its <think> block ({len(text)} characters of reasoning, no answer "
                "after it)",
                step,
            )
        )
        text = ""
    return text, broken


def stored(broken: Iterable[Degradation]) -> list[dict[str, Any]]:
    """Degradations as the response cache keeps them with the answer (a replay records them again)."""
    return [{"kind": d.kind, "detail": d.detail} for d in broken]


def replayed(kept: Iterable[dict[str, Any]] | None, where: Callable[[], str]) -> list[Degradation]:
    """What a cached answer broke, recorded again at the step that now reads it (`where()`)."""
    if not kept:
        return []
    step = where()
    return [Degradation(kind=d["kind"], step=step, detail=d.get("detail", "")) for d in kept]


_recorder: contextvars.ContextVar[list[Degradation] | None] = contextvars.ContextVar(
    "atelier_answer_degradations", default=None
)


@contextlib.contextmanager
def recording_answers() -> Iterator[list[Degradation]]:
    """Collect what the answers of the calls made in this block (and the tasks it starts) broke of
    the provider contract. An inner block takes its calls' degradations for itself: a judgment's
    stay with the judgment, not with the episode around it."""
    found: list[Degradation] = []
    token = _recorder.set(found)
    try:
        yield found
    finally:
        _recorder.reset(token)


def note(broken: Iterable[Degradation]) -> None:
    """Hand `broken` to the enclosing `recording_answers` block (none: the ledger and the cache
    entry still say what the answer was)."""
    found = _recorder.get()
    if found is not None:
        found.extend(broken)
