"""The provider contract on the chat-completions path (outside audit B of issue 48): an answer that is
not whole is a named degradation or failure, never cached as a clean answer, and every call is on the
ledger; a model setting no chat completion can serve, or a key-less local server, is told apart before
the run starts, the same way by `recipe check` and by the run.

The answers come from the tests' own stub servers on litellm's and the OpenAI SDK's real HTTP paths
(tests/openai_stub.py, tests/research_api_stub.py), with the few answers they do not give added here:
a reasoning block left open in more ways, a `"choices": []` answer, and a stream whose HTTP chunked
encoding breaks inside a chunk (the transport error a dropped connection raises part-way).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from atelier.agents.models import answer_contract
from atelier.agents.models.answer_contract import recording_answers
from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import Grounding
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from tests.openai_stub import OpenAIStub, QueuedStub, chat_sse
from tests.research_api_stub import ResearchApiStub, _sse, stream_bytes
from tests.test_cli_errors import TINY, atelier

MESSAGES = [{"role": "user", "content": "Which running shoes should I buy?"}]
# answers that end inside a reasoning block the model never closed, and one that only mentions the tag
UNCLOSED = {
    "unclosed_lead": ("\n" * 70 + "<think>Let me think about it and never stop", ""),
    "unclosed_pre": ("Okay.\n<think>Let me think about it and never stop", "Okay."),
    "unclosed_upper": ("<THINK>Let me think about it and never stop", ""),
    # a first block closed (which litellm and Perplexity's reader take out), then one left open
    "unclosed_again": ("<think>first</think>The answer is A.\n  <think>but then again", "The answer is A."),
}
INLINE = "Models such as R1 write a <think> block before they answer; this answer just mentions it."
CHUNK = 40  # bytes per HTTP chunk of a chunked stream


def write_chunked(handler: Any, data: bytes, cut: int) -> None:
    """`data` as an HTTP/1.1 chunked body broken at byte `cut`: the chunk holding it announces more
    bytes than it carries, and the connection closes (what a dropped connection leaves)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    sent = data[:cut]
    try:
        for start in range(0, len(sent), CHUNK):
            piece = sent[start : start + CHUNK]
            handler.wfile.write(f"{CHUNK:x}\r\n".encode() + piece + (b"\r\n" if len(piece) == CHUNK else b""))
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass
    handler.close_connection = True


class ChatStub(QueuedStub):
    """tests/openai_stub.py's server, with answers queued by `answer_with` taking precedence:
    `content:<key of UNCLOSED>` or `inline` (that text, finish_reason stop), `emptychoices` (HTTP
    200 with `"choices": []`), `chunkcut:N` (the stream, its chunked body broken at byte N)."""

    def whole_stream(self, body: dict[str, Any]) -> bytes:
        return chat_sse(self.completion(body))

    def answer_queued(self, handler: Any, answer: str, body: dict[str, Any]) -> None:
        if answer.startswith("chunkcut:"):
            return write_chunked(handler, self.whole_stream(body), int(answer.split(":")[1]))
        completion = self.completion(body)
        if answer == "emptychoices":
            completion["choices"] = []
        else:
            text = INLINE if answer == "inline" else UNCLOSED[answer.split(":")[1]][0]
            completion["choices"][0]["message"]["content"] = text
        handler._send(200, json.dumps(completion).encode())


class ChunkedPerplexity(ResearchApiStub):
    """tests/research_api_stub.py's Perplexity, where a `cut:N` stream breaks inside an HTTP chunk
    (its stub closes a plain body cleanly), and `content:<key of UNCLOSED>` answers that text."""

    def __init__(self) -> None:
        super().__init__("perplexity", [("https://a.example/x", "A")])

    def perplexity(self, body: dict[str, Any], behaviour: str = "ok") -> dict[str, Any]:
        if not behaviour.startswith("content:"):
            return super().perplexity(body, behaviour)
        answer = super().perplexity(body, "ok")
        answer["choices"][0]["message"]["content"] = UNCLOSED[behaviour.split(":")[1]][0]
        return answer

    def _handler_class(self):
        stub = self
        base = super()._handler_class()

        class Handler(base):
            def _events(self, events: list, cut: int | None = None) -> None:
                if cut is None:
                    return super()._events(events, cut)
                write_chunked(self, _sse(stub.kind, events), cut)

        return Handler


@pytest.fixture(scope="module")
def chat():
    with ChatStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def perplexity():
    with ChunkedPerplexity() as stub:
        yield stub


def gateway(base_url: str, tmp_path: Path, model: str = "openai/stub-model", **settings: Any) -> Gateway:
    role = ModelSettings(
        model=model, api_base=base_url, api_key="sk-stub", retry_backoff_s=0.0, **{"max_retries": 0, **settings}
    )
    return Gateway({"system": role}, cache=ResponseCache(tmp_path / "cache"), ledger=Ledger(None))


def ask(gw: Gateway, grounding: Grounding | None = None, messages: list[dict[str, Any]] = MESSAGES):
    """The text the gateway hands on (or the ModelCallError), and what it recorded as broken."""

    async def asked():
        with recording_answers() as broken:
            try:
                if grounding is None:
                    return await gw.text("system", messages), broken
                return (await gw.grounded("system", messages, grounding)).text, broken
            except ModelCallError as exc:
                return exc, broken

    return asyncio.run(asked())


# --------------------------------------------------------------------------- (b) reasoning left open


@pytest.mark.parametrize("how", sorted(UNCLOSED))
@pytest.mark.parametrize("path", ["chat", "grounded chat", "perplexity"])
def test_an_answer_ending_in_a_reasoning_block_it_never_closed_is_reasoning_unclosed_and_replayed_so(
    chat, perplexity, tmp_path, how, path
):
    """However the block opens — after 70 blank lines, after a preamble, in capitals, after a closed
    one — it is taken out of the text (what came before it stays), and the cache keeps the answer
    with what it broke: a rerun replays reasoning_unclosed, never a clean answer."""
    kept = UNCLOSED[how][1]
    messages = [{"role": "user", "content": f"{how} on {path}"}]
    if path == "perplexity":
        gw = gateway(perplexity.base_url, tmp_path, model="perplexity/sonar-deep-research")
        perplexity.script([])
        perplexity._script.append(f"content:{how}")  # a behaviour of this test's own stub
        grounding: Grounding | None = Grounding(api="chat")
    else:
        gw = gateway(chat.base_url, tmp_path)
        chat.answer_with(f"content:{how}")
        grounding = Grounding(api="chat") if path == "grounded chat" else None
    text, broken = ask(gw, grounding, messages)
    assert text == kept
    assert [d.kind for d in broken] == ["reasoning_unclosed"]
    assert answer_contract.REASONING_CLOSED.name in broken[0].detail and "<think>" in broken[0].detail
    entry = cached(gw)
    assert (
        len(gw.cache) == 1
        and entry["content"] == kept
        and [b["kind"] for b in entry["broken"]] == ["reasoning_unclosed"]
    )
    again, replayed = ask(gw, grounding, messages)  # from the cache: the same text, the same breach
    assert again == kept and [d.kind for d in replayed] == ["reasoning_unclosed"]


def test_an_answer_that_only_mentions_the_tag_inside_a_sentence_stays_clean(chat, tmp_path):
    gw = gateway(chat.base_url, tmp_path)
    chat.answer_with("inline")
    text, broken = ask(gw)
    assert text == INLINE and broken == []
    entry = cached(gw)
    assert entry["content"] == INLINE and "broken" not in entry


@pytest.mark.parametrize(
    ("text", "opened"),
    [
        ("<think>a", 0),
        ("  \t<Think >a", 0),
        ("x\n<think>a", 2),
        ("<think>a</think>b", None),
        ("<think>a</THINK>b", None),
        ("say <think> inline", None),
        ("<think>a</think>\n<think>b", 17),
        ("", None),
    ],
)
def test_where_an_unclosed_reasoning_block_opens(text, opened):
    assert answer_contract.unclosed_thinking_at(text) == opened


def cached(gw: Gateway) -> dict[str, Any]:
    """What the cache keeps of the gateway's one call (by the request key on its ledger line)."""
    [entry] = gw.ledger.entries
    assert gw.cache is not None and entry.request_key is not None
    kept = gw.cache.get(entry.request_key)
    assert kept is not None
    return kept


# --------------------------------------------------------------------------- (e) a stream broken part-way


@pytest.mark.parametrize("share", [0.15, 0.5, 0.9])
@pytest.mark.parametrize("path", ["litellm", "perplexity"])
def test_a_stream_broken_inside_a_chunk_is_answer_incomplete_naming_the_transport_error_retried_never_cached(
    chat, perplexity, tmp_path, share, path
):
    question = [{"role": "user", "content": f"chunk cut {path} {share}"}]
    if path == "perplexity":
        whole = stream_bytes("perplexity", perplexity.perplexity({"messages": question}))
        gw = gateway(perplexity.base_url, tmp_path, model="perplexity/sonar-deep-research", max_retries=1)
        perplexity.script([f"cut:{int(share * whole)}"] * 2)
        before = len(perplexity.requests)
        named = "RemoteProtocolError"
    else:
        whole = len(chat.whole_stream({"model": "stub-model", "messages": question}))
        gw = gateway(chat.base_url, tmp_path, max_retries=1)
        cut = int(share * whole)
        cut += 1 if cut % CHUNK == 0 else 0  # inside a chunk
        chat.answer_with(f"chunkcut:{cut}", f"chunkcut:{cut}")
        before = len(chat.requests)
        named = "TransferEncodingError"
    failed, broken = ask(gw, Grounding(api="chat", stream=True), question)
    assert isinstance(failed, ModelCallError)
    assert failed.verdict == "retry" and failed.attempts == 2  # the retry policy of a lost connection
    model = "perplexity/sonar-deep-research" if path == "perplexity" else "openai/stub-model"
    assert answer_contract.WHOLE.name in str(failed) and named in str(failed) and model in str(failed)
    assert [d.kind for d in broken] == ["answer_incomplete"] and named in broken[0].detail
    assert len(gw.cache) == 0
    requests = (perplexity if path == "perplexity" else chat).requests[before:]
    assert len(requests) == 2
    [entry] = gw.ledger.entries
    assert entry.status == "error" and entry.attempts == 2 and "IncompleteAnswer" in (entry.error or "")


# --------------------------------------------------------------------------- (f) no choices


@pytest.mark.parametrize("grounded", [False, True])
def test_an_answer_with_no_choices_is_a_named_incomplete_answer_on_the_ledger(chat, tmp_path, grounded):
    gw = gateway(chat.base_url, tmp_path, max_retries=1)
    chat.answer_with("emptychoices", "emptychoices")
    failed, broken = ask(gw, Grounding(api="chat") if grounded else None, [{"role": "user", "content": f"{grounded}"}])
    assert isinstance(failed, ModelCallError), failed
    said = str(failed)
    assert "openai/stub-model" in said and "no choices" in said and "IndexError" not in said
    assert failed.verdict == "retry" and failed.attempts == 2  # as an empty stream is
    assert [d.kind for d in broken] == ["answer_incomplete"] and "no choices" in broken[0].detail
    [entry] = gw.ledger.entries  # the provider was asked: the call is on the ledger
    assert entry.status == "error" and entry.attempts == 2 and "no choices" in (entry.error or "")
    assert len(gw.cache) == 0


# --------------------------------------------------------------------------- (d) background on a chat model

RECIPE = """
name = "bg"
[benchmark]
name = "tiny"
limit = 1
[models.system]
model = "openai/stub-model"
api_base = "http://127.0.0.1:9/v1"
api_key = "sk-stub"
{system_extra}
[models.judge]
model = "scripted"
[[systems]]
name = "s"
pipeline = "{pipeline}"
memory = {{ backend = "none" }}
{system_options}
[[judges]]
name = "lampqa_aspects"
"""
RESEARCHER = (
    'models.researcher = { model = "openai/o3-deep-research", api_base = "http://127.0.0.1:9/v1", '
    'api_key = "sk-stub", extra = { background = true } }'
)


@pytest.mark.parametrize(
    ("pipeline", "system_extra", "system_options", "where"),
    [
        ("direct", "extra = { background = true }", "", "models.system (openai/stub-model)"),
        (
            "research_api",
            "",
            'pipeline_options = { api = "chat" }\n' + RESEARCHER,
            "systems[0].models.researcher (openai/o3-deep-research)",
        ),
    ],
    ids=["direct", "research_api chat"],
)
def test_a_background_run_asked_of_a_chat_model_is_refused_by_recipe_check_and_preflight_by_name(
    tmp_path, capsys, monkeypatch, pipeline, system_extra, system_options, where
):
    recipe = tmp_path / "bg.toml"
    recipe.write_text(RECIPE.format(pipeline=pipeline, system_extra=system_extra, system_options=system_options))
    for flags in ([], ["--preflight"]):
        code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), *flags)
        assert code == 2, err
        [line] = [line for line in err.splitlines() if "background" in line]
        assert line.strip().startswith(where) and "extra background = true" in line
        assert "the Responses API's" in line and "Traceback" not in err


def test_a_background_run_of_the_responses_api_passes_recipe_check(tmp_path, capsys, monkeypatch):
    recipe = tmp_path / "bg.toml"
    options = 'pipeline_options = { api = "responses" }\n' + RESEARCHER
    recipe.write_text(RECIPE.format(pipeline="research_api", system_extra="", system_options=options))
    code, out, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 0, err
    assert out.startswith("ok: ")


def test_a_chat_call_asking_for_a_background_run_is_refused_unsent_and_on_the_ledger(chat, tmp_path):
    """Past a skipped preflight (`--no-preflight`, the Python API): refused at the call, by name."""
    gw = gateway(chat.base_url, tmp_path, extra={"background": True})
    before = len(chat.requests)
    failed, _ = ask(gw)
    assert isinstance(failed, ModelCallError) and failed.verdict == "fatal" and failed.attempts == 0
    assert "background" in str(failed) and "openai/stub-model" in str(failed)
    assert len(chat.requests) == before
    [entry] = gw.ledger.entries
    assert entry.status == "error" and "background" in (entry.error or "")


# --------------------------------------------------------------------------- (7) a key-less local server


def test_an_openai_compatible_server_with_no_key_passes_recipe_check_and_the_run_reaches_it(
    tmp_path, capsys, monkeypatch, cache_dir
):
    """docs/real-models.md's llama.cpp row: `openai/<alias>` at an `api_base`, no key anywhere."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ATELIER_API_KEY", raising=False)
    recipe = tmp_path / "keyless.toml"
    recipe.write_text(TINY)
    with OpenAIStub() as server:
        flags = ["--model", "openai/local-alias", "--api-base", server.base_url]
        code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), *flags)
        assert code == 0, err
        code, _, err = atelier(
            capsys,
            monkeypatch,
            "run",
            str(recipe),
            *flags,
            "--limit",
            "1",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        )
        assert code == 0, err
        assert "Missing credentials" not in err and server.requests  # probed, then asked by the run
    results = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert results and all(r["status"] == "ok" for r in results)


def test_a_server_that_wants_a_key_says_401_once_and_the_run_stops_with_exit_2_naming_the_model(
    tmp_path, capsys, monkeypatch, cache_dir
):
    """The placeholder key is refused as any wrong key is: not retried, and the preflight's text probe
    failing so stops there (the structured probe would be refused the same: not sent)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ATELIER_API_KEY", raising=False)
    recipe = tmp_path / "keyless.toml"
    recipe.write_text(TINY)
    with OpenAIStub(api_key="sk-the-real-one") as server:
        flags = ["--model", "openai/local-alias", "--api-base", server.base_url, "--limit", "1"]
        code, _, err = atelier(
            capsys, monkeypatch, "run", str(recipe), *flags, "--out", str(tmp_path / "run"), "--no-progress"
        )
        assert code == 2, err
        assert "openai/local-alias" in err and "401" in err and "Traceback" not in err
        assert [r["behaviour"] for r in server.requests] == ["refused 401"]  # the text probe alone
