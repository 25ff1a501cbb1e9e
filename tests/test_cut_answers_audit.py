"""Answers the provider cut, never taken for whole ones (issue 48, item 6; the outside audit's three
gaps), on litellm's and the OpenAI SDK's real HTTP paths against a stub server:

- a stream in which a chunk says `length` or `content_filter` and a later one `stop` is cut (or
  filtered): the cut anywhere in the stream wins, whatever came after it;
- a chat completion on the plain text path whose text is empty and whose message holds only
  `reasoning_content` is `reasoning_unclosed` (as on the grounded chat path), cached with it;
- a provider's own finish reason that says the answer was cut or filtered (`max_output_tokens`,
  `MAX_TOKENS`, `SAFETY`, `RECITATION`, `incomplete`), which litellm rewrites (to `stop` when it does
  not know it), is read as the cut it is: litellm keeps the word beside its own (the choice's
  `provider_specific_fields["native_finish_reason"]`; a stream's `received_finish_reason`), the
  OpenAI SDK (Perplexity) passes it on as it is.

Each is a named degradation, cached with the answer and recorded again when a rerun replays it:
never a clean answer in the cache.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from atelier.agents.models.answer_contract import read_finish, recording_answers
from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import Grounding
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from tests.openai_stub import QueuedStub, sse_body

TEXT = "The answer is to buy the lighter pair"
REASONING = "The user wants shoes; let me weigh cushioning against weight, then the price, then"


def whole(content: str | None, finish: str, reasoning: str | None = None) -> dict[str, Any]:
    """A chat completion answered whole: one choice ending with `finish`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def streamed(*chunks: tuple[str | None, str | None]) -> list[dict[str, Any]]:
    """A streamed chat completion's choices, one chunk each: (its delta's text or None, its finish reason)."""
    return [
        {"index": 0, "delta": {"role": "assistant"} | ({} if text is None else {"content": text}), "finish_reason": f}
        for text, f in chunks
    ]


class CutStub(QueuedStub):
    """tests/openai_stub.py's server answering the completions queued by `answer_with` (whole ones
    for a request without `stream`, a list of stream choices for one with it), then as it does."""

    def answer_queued(self, handler: Any, answer: Any, body: dict[str, Any]) -> None:
        head = {"id": "chatcmpl-cut", "created": 1, "model": body.get("model", "stub")}
        usage = {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
        if not body.get("stream"):
            assert isinstance(answer, dict), "a whole answer was queued for a streamed request"
            return handler._send(
                200, json.dumps(head | {"object": "chat.completion", "usage": usage} | answer).encode()
            )
        assert isinstance(answer, list), "stream choices were queued for a whole request"
        events = [head | {"object": "chat.completion.chunk", "choices": [c]} for c in answer]
        events.append(head | {"object": "chat.completion.chunk", "choices": [], "usage": usage})
        handler._send_events(sse_body(events))


@pytest.fixture(scope="module")
def stub():
    with CutStub() as server:
        yield server


@pytest.fixture(autouse=True)
def _nothing_left_queued(stub):
    yield
    assert not stub.answers, "a queued answer was never asked for"
    stub.answers.clear()


PATHS = {
    "text": ("openai/stub-model", None),  # Gateway.text: litellm's chat completion
    "grounded chat": ("openai/stub-model", Grounding(api="chat")),  # a search model through litellm
    "grounded chat stream": ("openai/stub-model", Grounding(api="chat", stream=True)),
    "perplexity": ("perplexity/sonar", Grounding(api="chat")),  # the OpenAI SDK
    "perplexity stream": ("perplexity/sonar", Grounding(api="chat", stream=True)),
}


def gateway(stub: CutStub, tmp_path: Path, path: str) -> Gateway:
    role = ModelSettings(model=PATHS[path][0], api_base=stub.base_url, api_key="sk-stub", max_retries=0)
    return Gateway({"system": role}, cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None))


def ask(gw: Gateway, path: str, question: str) -> tuple[Any, list[Any]]:
    """The text the gateway hands on (or the ModelCallError), and what it recorded as broken."""
    grounding = PATHS[path][1]
    messages = [{"role": "user", "content": question}]

    async def asked() -> Any:
        if grounding is None:
            return await gw.text("system", messages)
        return (await gw.grounded("system", messages, grounding)).text

    with recording_answers() as broken:
        try:
            return asyncio.run(asked()), list(broken)
        except ModelCallError as exc:
            return exc, list(broken)


def assert_cached_with(gw: Gateway, path: str, question: str, kinds: list[str], finish: str) -> None:
    """The one call is on the ledger with `finish`, cached with what it broke (`kinds`), and a rerun
    replays it with the same degradations, asking nothing."""
    [entry] = gw.ledger.entries
    assert entry.status == "ok" and entry.finish_reason == finish
    assert gw.cache is not None and entry.request_key is not None
    kept = gw.cache.get(entry.request_key)
    assert kept is not None and kept["finish_reason"] == finish
    assert [b["kind"] for b in kept.get("broken", [])] == kinds  # never a clean answer in the cache
    text, replayed = ask(gw, path, question)
    assert text == kept["content"] and [d.kind for d in replayed] == kinds
    assert gw.ledger.entries[-1].cache_hit


# --------------------------------------------------------------------------- 1. a cut mid-stream


@pytest.mark.parametrize("path", ["grounded chat stream", "perplexity stream"])
@pytest.mark.parametrize(
    ("cut", "kind"), [("length", "answer_cut"), ("content_filter", "answer_filtered")], ids=["length", "filter"]
)
@pytest.mark.parametrize("delta", ["with text", "empty"])
def test_a_cut_said_mid_stream_is_not_undone_by_a_later_stop(stub, tmp_path, path, cut, kind, delta):
    """It was recorded as a whole answer: the stream's last finish reason (`stop`) was all that was read."""
    question = f"mid-stream {cut} {delta} on {path}"
    middle = ("lighter", cut) if delta == "with text" else (None, cut)
    stub.answer_with(streamed(("The answer is", None), middle, (" pair", "stop")))
    gw = gateway(stub, tmp_path, path)
    text, broken = ask(gw, path, question)
    assert isinstance(text, str) and text.startswith("The answer is"), text
    assert [d.kind for d in broken] == [kind] and repr(cut) in broken[0].detail
    assert_cached_with(gw, path, question, [kind], cut)


def test_a_stream_that_ends_whole_stays_clean(stub, tmp_path):
    question = "a whole stream"
    stub.answer_with(streamed(("The answer", None), (" is A", None), (None, "stop")))
    gw = gateway(stub, tmp_path, "grounded chat stream")
    text, broken = ask(gw, "grounded chat stream", question)
    assert text == "The answer is A" and broken == []
    assert_cached_with(gw, "grounded chat stream", question, [], "stop")


# --------------------------------------------------------------------------- 2. only reasoning, plain path


@pytest.mark.parametrize("content", ["", None], ids=["empty", "null"])
@pytest.mark.parametrize(
    ("finish", "kinds"), [("stop", ["reasoning_unclosed"]), ("length", ["answer_cut", "reasoning_unclosed"])]
)
def test_a_plain_answer_made_only_of_reasoning_content_is_reasoning_unclosed(stub, tmp_path, content, finish, kinds):
    """Gateway.text handed on an empty text as a clean answer (and cached it so): the plain path did
    not read `reasoning_content`, which the grounded chat path reads as `reasoning_unclosed`."""
    question = f"reasoning only, {content!r}, {finish}"
    stub.answer_with(whole(content, finish, reasoning=REASONING))
    gw = gateway(stub, tmp_path, "text")
    text, broken = ask(gw, "text", question)
    assert text == ""
    assert [d.kind for d in broken] == kinds
    assert f"only reasoning ({len(REASONING)} characters of reasoning_content)" in broken[-1].detail
    assert_cached_with(gw, "text", question, kinds, finish)


def test_a_plain_answer_with_text_and_reasoning_content_keeps_its_text(stub, tmp_path):
    stub.answer_with(whole(TEXT, "stop", reasoning=REASONING))
    gw = gateway(stub, tmp_path, "text")
    text, broken = ask(gw, "text", "text and reasoning")
    assert text == TEXT and broken == []
    assert_cached_with(gw, "text", "text and reasoning", [], "stop")


# --------------------------------------------------------------------------- 3. the provider's own words

NATIVE = [
    ("max_output_tokens", "answer_cut", "length"),  # litellm does not know it: rewritten to "stop"
    ("incomplete", "answer_cut", "length"),  # the same
    ("MAX_TOKENS", "answer_cut", "length"),  # Gemini's: litellm maps it
    ("SAFETY", "answer_filtered", "content_filter"),
    ("RECITATION", "answer_filtered", "content_filter"),
]


@pytest.mark.parametrize("path", ["text", "grounded chat", "perplexity"])
@pytest.mark.parametrize(("said", "kind", "finish"), NATIVE, ids=[n[0] for n in NATIVE])
def test_a_whole_answer_the_provider_said_was_cut_in_its_own_words_is_cut(stub, tmp_path, path, said, kind, finish):
    question = f"whole, {said}, on {path}"
    stub.answer_with(whole(TEXT, said))
    gw = gateway(stub, tmp_path, path)
    text, broken = ask(gw, path, question)
    assert text == TEXT and [d.kind for d in broken] == [kind]
    assert_cached_with(gw, path, question, [kind], finish)


@pytest.mark.parametrize("path", ["grounded chat stream", "perplexity stream"])
@pytest.mark.parametrize("later", [False, True], ids=["last", "then stop"])
@pytest.mark.parametrize(("said", "kind", "finish"), NATIVE, ids=[n[0] for n in NATIVE])
def test_a_stream_the_provider_said_was_cut_in_its_own_words_is_cut(stub, tmp_path, path, later, said, kind, finish):
    question = f"streamed, {said}, {later}, on {path}"
    chunks = [("The answer is", None), (" A", said)] + ([(".", "stop")] if later else [])
    stub.answer_with(streamed(*chunks))
    gw = gateway(stub, tmp_path, path)
    text, broken = ask(gw, path, question)
    assert isinstance(text, str) and text.startswith("The answer is A"), text
    assert [d.kind for d in broken] == [kind]
    assert_cached_with(gw, path, question, [kind], finish)


@pytest.mark.parametrize(
    ("said", "read"),
    [
        ([], None),
        ([None, "stop"], "stop"),
        (["length", "stop"], "length"),
        ([None, "content_filter", None, "stop"], "content_filter"),
        (["Max_Output_Tokens", "stop"], "length"),
        (["end_turn", "stop"], "stop"),  # litellm's own word last: what is recorded when nothing was cut
        (["tool_calls"], "tool_calls"),
        (["SAFETY", "length"], "content_filter"),  # the first cut said
    ],
)
def test_read_finish_takes_any_cut_over_a_later_stop(said, read):
    assert read_finish(said) == read


# --------------------------------------------------------------------------- 4. an answer that broke off with an error


@pytest.mark.parametrize("word", ["error", "network_error"])
@pytest.mark.parametrize("path", list(PATHS))
def test_an_answer_the_provider_said_broke_off_with_an_error_is_not_whole(stub, tmp_path, path, word):
    """litellm rewrites finish_reason "error" (OpenRouter's word for a generation that failed part-way)
    to "stop": the partial text was scored as a whole answer and cached. It is an answer that did not
    arrive whole: the call fails by the clause (retried first, as a cut stream is), nothing is cached."""
    question = f"broke off with {word} on {path}"
    if path.endswith("stream"):
        stub.answer_with(streamed(("The answer is", None), (" A", word)))
    else:
        stub.answer_with(whole("The answer is A", word))
    gw = gateway(stub, tmp_path, path)
    failed, broken = ask(gw, path, question)
    assert isinstance(failed, ModelCallError), failed
    assert [d.kind for d in broken] == ["answer_incomplete"]
    # (litellm's own stream reader raises on it already, in its words)
    assert f"finish_reason {word!r} (it broke off)" in broken[0].detail or path == "grounded chat stream"
    assert word.split("_")[0] in broken[0].detail
    [entry] = gw.ledger.entries
    assert entry.status == "error" and gw.cache is not None and entry.request_key is not None
    assert gw.cache.get(entry.request_key) is None  # never cached


def test_a_retried_answer_that_broke_off_is_answered_whole_by_the_next_attempt(stub, tmp_path):
    stub.answer_with(whole("The answer is", "error"))
    role = ModelSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-stub", max_retries=1)
    gw = Gateway({"system": role}, cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None))
    text, broken = ask(gw, "text", "retried after an error")
    assert isinstance(text, str) and text != "The answer is" and broken == []  # the stub's own whole answer
    [entry] = gw.ledger.entries
    assert entry.status == "ok" and entry.attempts == 2
