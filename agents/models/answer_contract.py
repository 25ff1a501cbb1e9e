"""The provider's contract: an answer the gateway hands on is one that arrived whole.

What a provider's answer must be before anything scores it, clause by clause; the gateway
(agents/models/gateway.py) holds every answer of every call to them:

- an answer that arrived whole: a streamed answer ends with its terminal event (a chunk with a
  `finish_reason`; the Responses API's `response.completed`) and its bytes are not cut off on the
  way (a transport error mid-stream: `stream_broken`), a chat completion holds a choice, and a
  Responses (or Interactions) answer is done — a background one polled to its end
  (agents/models/grounding.py), never read `queued` or `in_progress`, nor ended `failed` or
  `cancelled`, and no finish reason says it broke off with an error (`error`, `network_error`,
  which litellm rewrites to `stop`: `broke_off`). Broken: the call fails (`IncompleteAnswer`), `answer_incomplete` is recorded, nothing
  is cached. It is retried like a lost connection, but for an answer still running, which asking
  again would not change and would pay for again: a foreground response read `queued` or
  `in_progress` (only a background request is polled), or a background one still so when the
  call's timeout runs out (cancelled on the server) — each named by its status;
- not cut at the token limit (`finish_reason` length, a Responses answer `incomplete` for
  `max_output_tokens`): `answer_cut`;
- not withheld by a content filter (`finish_reason` content_filter): `answer_filtered`.
  For both, a finish reason is read in the provider's own words (`max_output_tokens`, `MAX_TOKENS`,
  `SAFETY`, `RECITATION`, ...: `read_finish`), which litellm may have rewritten (to `stop`, for a
  word it does not know); and a stream is cut if any chunk said so, whatever a later one said;
- reasoning closed before the answer: a `<think>` block that never closes is the model's partial
  reasoning, not its answer: it is taken out of the text, from its opening tag to the end (what
  came before it stays: most often nothing, as the block opens the answer) and `reasoning_unclosed`
  is recorded. The opening tag is found in any case (`<THINK>`), with attributes (`<think
  type="x">`) and as `<thinking>`, at the start of any line, after any blank lines or a preamble; a
  tag mentioned inside a sentence opens no block. An answer whose reasoning came in a field of its
  own (a chat message's `reasoning_content`, as a server that splits the `<think>` block off sends
  it) with no text after it is the same answer — reasoning that never reached its answer, whatever
  its finish reason said — and breaks the same clause (`reasoning_only`): nothing is kept, and
  `reasoning_unclosed` is recorded. Not `answer_incomplete`: the answer did arrive whole (its
  terminal event came), and asking again replays the same decoding more often than not; as for an
  unclosed `<think>`, the empty answer is used, named, and cached with its degradation.

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

# finish reasons that say the answer is not all the model would have said (as `read_finish` reads them)
_CUT = {"length": NOT_CUT, "content_filter": NOT_FILTERED}
# a provider's own words for an answer cut at its token limit or withheld by a filter, in any case:
# litellm maps those it knows to "length" or "content_filter" but rewrites any other (OpenAI's
# Responses-style "max_output_tokens", "incomplete") to "stop"; the OpenAI SDK hands them on as sent
_CUT_WORDS = dict.fromkeys(
    ("length", "max_tokens", "max_output_tokens", "max_completion_tokens", "model_length", "incomplete"), "length"
) | dict.fromkeys(
    (
        "content_filter",
        "content_filtered",
        "safety",
        "recitation",
        "refusal",
        "prohibited_content",
        "blocklist",
        "spii",
        "image_safety",
        "image_prohibited_content",
        "image_recitation",
        "sensitive",
        "guardrail_intervened",
        "error_toxic",
    ),
    "content_filter",
)
# a reasoning block's tags: the opening one counts at the start of a line (after spaces or tabs),
# never inside a sentence that mentions it: `<think>`, `<think type="x">` (attributes), `<thinking>`
_OPENING_THINK = re.compile(r"^[^\S\n]*<think(?:ing)?(?:\s[^<>]*)?>", re.IGNORECASE | re.MULTILINE)
_CLOSING_THINK = re.compile(r"</think(?:ing)?\s*>", re.IGNORECASE)


class IncompleteAnswer(RuntimeError):
    """A provider answer that did not arrive whole. `retryable`: asking again may help (a stream cut
    off, an answer that ended failed), unlike reading an answer still being made. `reason`: what
    broke, without the clause's name."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(f"{WHOLE.label} broken: {message}")
        self.reason = message
        self.retryable = retryable


def stream_broken(exc: BaseException, *, retryable: bool) -> IncompleteAnswer | None:
    """A streamed answer whose bytes stopped coming part-way, as the answer that did not arrive whole
    it is (None for any other failure): litellm's `MidStreamFallbackError` (raised for an error while
    it reads a stream it had begun), or a transport error the OpenAI SDK lets out of a stream it
    reads (a connection closed inside a chunk: `RemoteProtocolError`, reset, a read timed out) —
    named by the transport error under it. `retryable`: as that error is (the caller's
    `provider_errors.classify`: a lost connection is retried); a failure before the stream began (a
    refused connection, an HTTP error status) is no broken stream."""
    import httpx
    from litellm.exceptions import MidStreamFallbackError

    if isinstance(exc, IncompleteAnswer):
        return None
    before_it_began = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
    raw = isinstance(exc, httpx.TransportError) and not isinstance(exc, before_it_began)
    if not (raw or isinstance(exc, MidStreamFallbackError)):
        return None
    under = _transport_error(exc)
    said = " ".join(str(under).split()) or "no message"
    said = said if len(said) <= 300 else said[:299] + "…"
    return IncompleteAnswer(f"the stream broke off part-way ({type(under).__name__}: {said})", retryable=retryable)


def _transport_error(exc: BaseException) -> BaseException:
    """The innermost transport error (httpx's, aiohttp's) under `exc` — through litellm's
    `original_exception`, causes and contexts — else the innermost error of all."""
    import aiohttp
    import httpx

    chain: list[BaseException] = []
    found: BaseException | None = exc
    while found is not None and len(chain) < 20:
        chain.append(found)
        below = (getattr(found, "original_exception", None), found.__cause__, found.__context__)
        found = next((e for e in below if isinstance(e, BaseException) and all(e is not c for c in chain)), None)
    transport = [e for e in chain if isinstance(e, (httpx.TransportError, aiohttp.ClientError))]
    return (transport or chain)[-1]


def unclosed_thinking_at(text: str) -> int | None:
    """Where the `<think>` block that `text` opens and never closes starts (the answer ended inside
    it): the last opening tag at the start of a line, in any case, with no closing tag after it.
    None: every block it opens is closed, or it opens none."""
    last = None
    for last in _OPENING_THINK.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    if last is None or _CLOSING_THINK.search(text, last.end()) is not None:
        return None
    return last.start()


# the opening tag `reasoning_only` puts before reasoning that came in a field of its own
_REASONING_FIELD = '<think source="reasoning_content">'


def reasoning_only(reasoning: str) -> str:
    """The text of an answer that is nothing but reasoning sent in a field of its own (a chat
    message's `reasoning_content`, its text empty): that reasoning as a `<think>` block that opens
    the answer and never closes — what the model says when its server does not split it off — so
    that `answer_breaches` reads it by the same clause (`reasoning_unclosed`) and keeps nothing."""
    tagless = _CLOSING_THINK.sub("", _OPENING_THINK.sub("", reasoning))  # one block, from the start to the end
    return _REASONING_FIELD + "\n" + tagless


def read_finish(said: Iterable[str | None]) -> str | None:
    """The finish reason of an answer whose provider said each of `said`, in order (what a stream's
    chunks said; the provider's own word, then litellm's): "length" or "content_filter" when any of
    them says the answer was cut or withheld, in whatever words (`_CUT_WORDS`) — a later "stop" does
    not make it whole again — else the last one said (None: none was)."""
    last = None
    for reason in said:
        if not reason:
            continue
        cut = _CUT_WORDS.get(reason.lower())
        if cut is not None:
            return cut
        last = reason
    return last


def choice_finish(choice: Any, earlier: Iterable[str | None] = ()) -> str | None:
    """A litellm chat choice's finish reason as `read_finish` reads it, after `earlier` (what a
    stream's chunks said before), from its words as `_finish_words` gives them (litellm says "stop"
    for a provider's word it does not know: the provider's own word comes first)."""
    return read_finish([*earlier, *_finish_words(choice)])


def _finish_words(choice: Any) -> list[str | None]:
    """A litellm chat choice's finish reasons: the provider's own word, which litellm keeps beside its
    own when it rewrote it (`provider_specific_fields["native_finish_reason"]`), then litellm's."""
    fields = getattr(choice, "provider_specific_fields", None)
    native = fields.get("native_finish_reason") if isinstance(fields, dict) else None
    return [native if isinstance(native, str) else None, getattr(choice, "finish_reason", None)]


def answer_or_reasoning(text: str, message: Any, finish_reason: str | None) -> str:
    """A chat message's answer: its `text`, or — that text empty, the message's reasoning come in a
    field of its own (`reasoning_content`) and no tool called — that reasoning as `reasoning_only`
    writes it, for `answer_breaches` to read as `reasoning_unclosed`."""
    reasoning = getattr(message, "reasoning_content", None)
    if text.strip() or not isinstance(reasoning, str) or not reasoning.strip():
        return text
    if finish_reason == "tool_calls" or getattr(message, "tool_calls", None):
        return text
    return reasoning_only(reasoning)


# a provider's words for an answer that broke off with an error on its side (OpenRouter's "error",
# litellm's own "network_error"), which litellm rewrites to "stop"
_ERROR_WORDS = frozenset({"error", "network_error"})


def broke_off(said: Iterable[str | None]) -> IncompleteAnswer | None:
    """The IncompleteAnswer of an answer whose provider said, as one of its finish reasons `said`,
    that it ended with an error (`_ERROR_WORDS`): not whole, retried like a stream cut off; else None."""
    word = next((reason for reason in said if reason and reason.lower() in _ERROR_WORDS), None)
    if word is None:
        return None
    return IncompleteAnswer(f"the provider's answer ended with finish_reason {word!r} (it broke off)", retryable=True)


def with_a_choice(response: Any) -> Any:
    """A chat completion that holds a choice (its answer); one whose `choices` is empty (HTTP 200
    with `"choices": []`), or whose finish reason says it broke off with an error (`broke_off`), is
    an answer that did not arrive whole: retried like an empty stream."""
    if not getattr(response, "choices", None):
        raise IncompleteAnswer("the provider answered with no choices (an empty 'choices' list)", retryable=True)
    broken = broke_off(_finish_words(response.choices[0]))
    if broken is not None:
        raise broken
    return response


def answer_breaches(
    finish_reason: str | None, text: str, where: Callable[[], str], who: str = "the provider"
) -> tuple[str, list[Degradation]]:
    """The text to hand on, and the degradations of what the answer broke of the provider contract
    (its finish reason, an unclosed reasoning block), recorded at the step `where()` names (asked
    only when something broke); `who` answered."""
    clause = _CUT.get(read_finish([finish_reason]) or "")
    opened = unclosed_thinking_at(text)
    if clause is None and opened is None:
        return text, []
    step = where()
    broken = []
    if clause is not None:
        broken.append(clause.broken(f"{who}'s answer ended with finish_reason {finish_reason!r}", step))
    if opened is not None:
        before = text[:opened].rstrip()  # what the answer said before its reasoning opened
        kept = f"; the {len(before)} characters before it are kept" if before else ""
        if text.startswith(_REASONING_FIELD):  # `reasoning_only`: the reasoning came in its own field
            said = (
                f"{who}'s answer was only reasoning ({len(text) - len(_REASONING_FIELD) - 1} characters of "
                "reasoning_content) with no text after it"
            )
        else:
            found = _OPENING_THINK.match(text, opened)
            tag = found.group().strip() if found else "<think>"
            tag = tag if len(tag) <= 40 else tag[:39] + "…"
            opening = "" if tag == "<think>" else f"opened as {tag}, "
            said = (
                f"{who}'s answer ended inside its <think> block ({opening}{len(text) - opened} characters of "
                f"reasoning from character {opened}, no answer after it){kept}"
            )
        broken.append(REASONING_CLOSED.broken(said, step))
        text = before
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
