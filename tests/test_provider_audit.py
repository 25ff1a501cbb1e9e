"""Outside audit E (issue 48, items 6 and 7), each finding held here:

- D4: `recipe check --model` runs the run's probing preflight: a rejected key is exit 2, as for `run`;
- D7: `plan`, when it prices a model that is neither scripted nor local, runs the run's preflight of
  it (key and probe): a missing or rejected key is exit 2; `--no-cost` and scripted plans call nothing;
- D5: a Responses answer asked for in the foreground and read `queued` is not polled: it fails at
  once as answer_incomplete naming the status, not asked again;
- D6: a background response still running when the call's timeout runs out fails as
  answer_incomplete naming its status and the timeout, is cancelled, and is not started again;
- D8: an answer made only of `reasoning_content` (its text empty) is `reasoning_unclosed`, cached
  with it and replayed with it;
- D9: `<think type="x">` and `<thinking>` opening an answer and never closed are `reasoning_unclosed`;
  the tags mentioned inside a sentence open nothing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from atelier.agents.models.answer_contract import answer_breaches, recording_answers
from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import Grounding
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from tests.openai_stub import OpenAIStub
from tests.research_api_stub import ResearchApiStub
from tests.test_cli_errors import atelier

QUESTION = [{"role": "user", "content": "Trains?"}]
REASONING = "Let me reason step by step about what the user wants, the capital, museums, and history."


# --------------------------------------------------------------------------- a small provider


def _response(rid: str, status: str) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "model": "stub",
        "output": [],
        "tools": [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "usage": None,
    }


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-rc", "object": "chat.completion.chunk", "created": 1, "model": "stub", "choices": [choice]}


class Provider:
    """An OpenAI-compatible endpoint on 127.0.0.1 answering as audit E's stub did:
    POST /v1/responses a response `queued` although no background was asked (whole, or a stream whose
    `response.completed` event carries it `queued`), GET /v1/responses/{id} `queued` for ever; POST
    /v1/chat/completions an answer made only of `reasoning_content`, finish_reason stop (whole or
    streamed). Every request is kept in `requests` as (method, path)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _events(self, events: list[tuple[str | None, dict[str, Any]]], done: bool) -> None:
                body = "".join((f"event: {k}\n" if k else "") + f"data: {json.dumps(d)}\n\n" for k, d in events)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write((body + ("data: [DONE]\n\n" if done else "")).encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                provider.requests.append(("GET", self.path))
                self._send(200, _response(self.path.rsplit("/", 1)[-1], "queued"))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                provider.requests.append(("POST", self.path))
                if self.path.endswith("/cancel"):
                    return self._send(200, _response(self.path.split("/")[-2], "cancelled"))
                if self.path.endswith("/responses"):
                    queued = _response(f"resp_{len(provider.requests)}", "queued")
                    if not body.get("stream"):
                        return self._send(200, queued)
                    created = {"type": "response.created", "sequence_number": 0, "response": queued}
                    completed = {"type": "response.completed", "sequence_number": 1, "response": queued}
                    return self._events([("response.created", created), ("response.completed", completed)], False)
                if not body.get("stream"):
                    message = {"role": "assistant", "content": "", "reasoning_content": REASONING}
                    return self._send(
                        200,
                        {
                            "id": "chatcmpl-rc",
                            "object": "chat.completion",
                            "created": 1,
                            "model": "stub",
                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25},
                        },
                    )
                chunks = [_chat_chunk({"role": "assistant", "content": ""})]
                chunks += [
                    _chat_chunk({"reasoning_content": REASONING[i : i + 10]}) for i in range(0, len(REASONING), 10)
                ]
                chunks.append(_chat_chunk({}, "stop"))
                self._events([(None, c) for c in chunks], True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Provider:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _asked(gateway: Gateway, grounding: Grounding) -> tuple[Any, list[Any]]:
    """The grounded answer (or the error it raised), and what its answers broke."""

    async def ask() -> Any:
        return await gateway.grounded("researcher", QUESTION, grounding)

    with recording_answers() as broken:
        try:
            return asyncio.run(ask()), list(broken)
        except ModelCallError as exc:
            return exc, list(broken)


def _researcher(base_url: str, **settings: Any) -> ModelSettings:
    return ModelSettings(model="openai/stub", api_base=base_url, api_key="sk-stub", **settings)


# --------------------------------------------------------------------------- D5


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_foreground_response_read_queued_is_not_polled_and_fails_at_once_naming_its_status(cache_dir, stream):
    """It was polled by GET anyway: 66 requests and a timeout (whole), or a GET answered 404 read as
    an unknown model (streamed). Not asked again: the endpoint answers the next request the same way,
    each request starting a job of its own."""
    with Provider() as provider:
        settings = _researcher(provider.base_url, timeout_s=3, max_retries=2, retry_backoff_s=0.01)
        failed, broken = _asked(
            Gateway({"researcher": settings}, cache=None), Grounding(api="responses", stream=stream)
        )
    assert isinstance(failed, ModelCallError) and failed.verdict == "fatal" and failed.attempts == 1
    assert "is still queued" in str(failed) and "foreground" in str(failed) and "404" not in str(failed)
    assert provider.requests == [("POST", "/v1/responses")]  # no GET, no second request
    assert [d.kind for d in broken] == ["answer_incomplete"] and "queued" in broken[0].detail


# --------------------------------------------------------------------------- D6


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_background_response_still_running_at_the_timeout_is_named_cancelled_and_not_started_again(cache_dir, stream):
    """It failed as 'timed out (after 3 attempts)', starting a new (paid) background job each time."""
    # streamed: the stream breaks off after response.created, the response goes on and is polled
    cites = [("https://a.example/x", "A")]
    with ResearchApiStub("responses", cites, polls=10_000, cut_background_stream=stream) as stub:
        settings = ModelSettings(
            model="openai/o3-deep-research",
            api_base=stub.base_url,
            api_key="k",
            timeout_s=1.0,
            max_retries=2,
            retry_backoff_s=0.01,
        )
        grounding = Grounding(api="responses", background=True, stream=stream, poll_s=0.05)
        failed, broken = _asked(Gateway({"researcher": settings}, cache=None), grounding)
        created = [r for r in stub.requests if r["method"] == "POST" and not r["path"].endswith("/cancel")]
        assert len(created) == 1  # one background job, not one per attempt
        (job,) = stub.background
        assert stub.background[job]["status"] == "cancelled"  # not left running (and billing)
    assert isinstance(failed, ModelCallError) and failed.verdict == "fatal" and failed.attempts == 1
    message = str(failed)
    assert "timed out" not in message and "still in_progress" in message and "timeout_s = 1 s" in message
    assert [d.kind for d in broken] == ["answer_incomplete"] and "still in_progress" in broken[0].detail


def test_a_gemini_interaction_still_running_at_the_timeout_is_named_cancelled_and_not_started_again(cache_dir):
    """The same for Gemini's Interactions API: it timed out generically and each retry started a new job."""
    with ResearchApiStub("interactions", [("https://a.example/x", "A")], polls=10_000) as stub:
        settings = ModelSettings(
            model="gemini/deep-research-pro-preview-12-2025",
            api_base=stub.base_url,
            api_key="k",
            timeout_s=1.0,
            max_retries=2,
            retry_backoff_s=0.01,
        )
        failed, broken = _asked(
            Gateway({"researcher": settings}, cache=None), Grounding(api="interactions", poll_s=0.05)
        )
        created = [r for r in stub.requests if r["method"] == "POST" and not r["path"].endswith("/cancel")]
        assert len(created) == 1
        (job,) = stub.background
        assert stub.background[job]["status"] == "cancelled"
    assert isinstance(failed, ModelCallError) and failed.attempts == 1
    assert "still in_progress" in str(failed) and "timeout_s = 1 s" in str(failed) and "timed out" not in str(failed)
    assert [d.kind for d in broken] == ["answer_incomplete"]


def test_a_background_response_that_ends_in_time_is_still_polled_to_its_end(cache_dir):
    with ResearchApiStub("responses", [("https://a.example/x", "A")], polls=3) as stub:
        settings = ModelSettings(model="openai/o3-deep-research", api_base=stub.base_url, api_key="k", timeout_s=5)
        answer, broken = _asked(
            Gateway({"researcher": settings}, cache=None), Grounding(api="responses", background=True, poll_s=0.01)
        )
        assert [r["method"] for r in stub.requests] == ["POST", "GET", "GET", "GET", "GET"]
    assert not isinstance(answer, Exception) and answer.text.startswith("Research on") and broken == []


# --------------------------------------------------------------------------- D8


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_answer_made_only_of_reasoning_content_is_reasoning_unclosed_and_replayed_so(tmp_path, cache_dir, stream):
    """It was scored and cached as a complete answer with empty text, and replayed as one. Read as
    the reasoning that never reached its answer (the clause of an unclosed <think>): nothing is
    kept, the degradation is cached with the answer and recorded again on a replay."""
    grounding = Grounding(api="chat", stream=stream)
    with Provider() as provider:
        settings = _researcher(provider.base_url, max_retries=0)
        for replay in (False, True):
            gateway = Gateway({"researcher": settings}, cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None))
            answer, broken = _asked(gateway, grounding)
            assert not isinstance(answer, Exception), answer
            assert answer.text == ""
            assert [d.kind for d in broken] == ["reasoning_unclosed"]
            assert f"only reasoning ({len(REASONING)} characters of reasoning_content)" in broken[0].detail
            [entry] = gateway.ledger.entries
            assert entry.cache_hit is replay and entry.finish_reason == "stop"
        assert len(provider.requests) == 1


def test_reasoning_content_closing_tags_inside_it_still_keep_nothing():
    from atelier.agents.models.answer_contract import reasoning_only

    text = reasoning_only("first </think> then\n<think>\nmore </thinking> and done")
    kept, broken = answer_breaches("stop", text, lambda: "step")
    assert kept == "" and [d.kind for d in broken] == ["reasoning_unclosed"]


# --------------------------------------------------------------------------- D9


@pytest.mark.parametrize(
    ("text", "kept", "tag"),
    [
        ('<think type="x">Let me think about it and never stop', "", '<think type="x">'),
        ("<thinking>Let me think about it and never stop", "", "<thinking>"),
        ("<THINKING>\nLet me think", "", "<THINKING>"),
        ("The answer is A.\n  <thinking mode='deep'>but then again", "The answer is A.", "<thinking mode='deep'>"),
        (
            "<thinking>a plan</thinking>The answer is A.\n<think reason=x>but",
            "<thinking>a plan</thinking>The answer is A.",
            "<think reason=x>",
        ),
    ],
)
def test_unclosed_think_tags_with_attributes_and_thinking_are_reasoning_unclosed(text, kept, tag):
    answer, broken = answer_breaches("stop", text, lambda: "step")
    assert answer == kept
    assert [d.kind for d in broken] == ["reasoning_unclosed"] and f"its <think> block (opened as {tag}, " in broken[
        0
    ].detail


@pytest.mark.parametrize(
    "text",
    [
        'Models write a <think type="x"> block before they answer; this answer only mentions it.',
        "Answer: <thinking>is what some models open with, and this sentence names it",
        "<thinking>a plan</thinking>The answer is A.",
        '<think type="x">a plan</think>The answer is A.',
        "<thinker>is no reasoning tag",
    ],
)
def test_a_reasoning_tag_mentioned_inside_a_sentence_or_closed_opens_nothing(text):
    assert answer_breaches("stop", text, lambda: "step") == (text, [])


# --------------------------------------------------------------------------- D4


TINY_RECIPE = (
    'name = "t"\n[benchmark]\nname = "tiny"\nlimit = 1\n[[systems]]\nname = "s"\nmemory = { backend = "none" }\n'
)


def test_recipe_check_with_model_probes_it_and_a_rejected_key_is_exit_2_as_for_run(tmp_path, capsys, monkeypatch):
    """It only checked that a key was set: exit 0 with a key the endpoint refuses (401)."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    with OpenAIStub(api_key="sk-good") as server:
        flags = ["--model", "openai/stub", "--api-base", server.base_url]
        code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), *flags, "--api-key", "sk-revoked")
        assert code == 2, err
        assert "authentication failed (HTTP 401, not retried)" in err and "Traceback" not in err
        assert "preflight failed" in err and f"(openai/stub at {server.base_url})" in err
        refused = len(server.requests)
        assert refused >= 1
        code, out, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), *flags, "--api-key", "sk-good")
        assert code == 0, err
        assert "preflight ok" in err and out.startswith("ok: ")
        assert len(server.requests) > refused  # probed
        # without --model (or --api-base, --preflight), a plain check calls nothing
        monkeypatch.delenv("ATELIER_API_KEY", raising=False)
        code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
        assert code == 0, err and "preflight" not in err


# --------------------------------------------------------------------------- D7


@pytest.fixture(scope="module")
def pilot(tmp_path_factory) -> Path:
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    folder = tmp_path_factory.mktemp("pilot") / "run"
    run_recipe(
        parse_recipe(
            {
                "name": "pilot",
                "benchmark": {"name": "tiny", "limit": 2},
                "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
                "systems": [{"name": "a", "memory": {"backend": "none"}}, {"name": "b", "memory": {"backend": "full"}}],
                "judges": [{"name": "lampqa_aspects"}],
                "run": {"out_dir": str(folder.parent)},
            }
        ),
        folder,
        progress=False,
    )
    return folder


def _priced_pilot(pilot: Path, to: Path, base_url: str) -> Path:
    """The scripted pilot, as if its recipe had named a real model (openai/stub at `base_url`, its
    key in PLAN_AUDIT_KEY) for the system and the judge."""
    shutil.copytree(pilot, to)
    config = json.loads((to / "config.json").read_text())
    real = {"model": "openai/stub", "api_base": base_url, "api_key_env": "PLAN_AUDIT_KEY"}
    config["recipe"]["models"] = {"system": real, "judge": real}
    (to / "config.json").write_text(json.dumps(config))
    return to


def test_plan_that_prices_a_real_model_runs_its_preflight_a_missing_or_rejected_key_is_exit_2(
    pilot, tmp_path, capsys, monkeypatch, cache_dir
):
    """It priced the recipe's models with no check of their keys (exit 0, unset or refused)."""
    with OpenAIStub(api_key="sk-good") as server:
        run = _priced_pilot(pilot, tmp_path / "priced", server.base_url)
        monkeypatch.delenv("PLAN_AUDIT_KEY", raising=False)
        code, _, err = atelier(capsys, monkeypatch, "plan", str(run), "--detect", "0.5")
        assert code == 2, err
        assert "api_key_env names PLAN_AUDIT_KEY, which is not set" in err and "Traceback" not in err
        assert server.requests == []
        monkeypatch.setenv("PLAN_AUDIT_KEY", "sk-revoked")
        code, _, err = atelier(capsys, monkeypatch, "plan", str(run), "--detect", "0.5")
        assert code == 2, err
        assert "authentication failed (HTTP 401, not retried)" in err and "preflight failed" in err
        assert server.requests  # probed
        before = len(server.requests)
        code, _, err = atelier(capsys, monkeypatch, "plan", str(run), "--detect", "0.5", "--no-cost", "--json")
        assert code == 0, err  # prices nothing: checks nothing
        assert len(server.requests) == before


def test_plan_with_model_probes_it_too(pilot, capsys, monkeypatch, cache_dir):
    """--model used to be checked for a key only (probe=False)."""
    called = []

    async def probe(settings, where, ledger=None, timeout_s=0.0):
        called.append(settings.model)
        return "text probe: authentication failed (HTTP 401, not retried)"

    monkeypatch.setattr("atelier.runs.execution.preflight.probe_problem", probe)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-revoked")
    code, _, err = atelier(capsys, monkeypatch, "plan", str(pilot), "--detect", "0.5", "--model", "openai/gpt-4o")
    assert code == 2, err
    assert called == ["openai/gpt-4o"] and "(openai/gpt-4o): text probe: authentication failed" in err


def test_a_plan_of_scripted_models_checks_nothing_and_stays_offline(pilot, monkeypatch):
    from atelier.runs.execution.preflight import check_priced_models
    from atelier.runs.folder.layout import load_run_config
    from atelier.runs.folder.recipe import Recipe

    async def probe(*args, **kwargs):
        raise AssertionError("a scripted plan probes nothing")

    monkeypatch.setattr("atelier.runs.execution.preflight.probe_problem", probe)
    recipe = Recipe.model_validate(load_run_config(pilot)["recipe"])
    assert asyncio.run(check_priced_models(recipe)) is False
    local = recipe.with_overrides(model="local/smollm2")
    assert asyncio.run(check_priced_models(local)) is False
