"""Structured output that adapts to the server, and errors no retry can fix failing at once.

Every test counts the requests that reached the stub server: a fallback costs one refused
request per weaker mode, once per endpoint; a non-retryable error costs exactly one request.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Literal

import pytest
from pydantic import BaseModel

from atelier.agents.models.gateway import Gateway, ModelCallError, extract_json
from atelier.agents.models.ledger import Ledger, read_ledger
from atelier.agents.models.provider_errors import server_message
from atelier.agents.models.settings import ModelSettings
from atelier.agents.models.structured_output import MODES, MODES_FILE, ModeMemory
from tests.openai_stub import OpenAIStub


class Verdict(BaseModel):
    match_score: Literal[0, 1, 2]
    reason: str


MESSAGES = [{"role": "system", "content": "You are a judge."}, {"role": "user", "content": "Score the answer."}]


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    ModeMemory.forget_process()
    yield
    ModeMemory.forget_process()


def _gateway(stub: OpenAIStub, tmp_path, *, model="openai/gpt-4o-mini", modes=None, **overrides) -> Gateway:
    settings = ModelSettings(
        model=model,
        api_base=stub.base_url,
        api_key=overrides.pop("api_key", "sk-stub"),
        retry_backoff_s=0.5,
        timeout_s=20.0,
        **overrides,
    )
    return Gateway(
        {"judge": settings},
        ledger=Ledger(tmp_path / "ledger.jsonl", run_id="r"),
        modes=modes or ModeMemory.in_folder(tmp_path),
    )


@pytest.mark.parametrize(
    ("kind", "chosen", "asked"),
    [
        ("openai", "json_schema", ["json_schema"]),
        ("llamacpp", "json_object", ["json_schema", "json_object"]),
        ("no_json_schema", "json_object", ["json_schema", "json_object"]),
        ("no_response_format", "tool", ["json_schema", "json_object", "tool"]),
        ("text_only", "prompt", ["json_schema", "json_object", "tool", "none"]),
    ],
)
async def test_each_server_kind_gets_the_strongest_mode_it_accepts(tmp_path, kind, chosen, asked):
    with OpenAIStub(kind=kind) as stub:
        gw = _gateway(stub, tmp_path)
        first = await gw.structured("judge", MESSAGES, Verdict)
        assert isinstance(first, Verdict)
        assert [r["mode"] for r in stub.requests] == asked  # one request per mode tried, no retries
        # learned: the next call (another prompt) asks in the chosen mode straight away
        await gw.structured("judge", [{"role": "user", "content": "Score another answer."}], Verdict)
        assert [r["mode"] for r in stub.requests[len(asked) :]] == [asked[-1]]
    entries = read_ledger(tmp_path / "ledger.jsonl")
    assert [e.status for e in entries] == ["refused"] * (len(asked) - 1) + ["ok", "ok"]
    assert [e.structured_mode for e in entries] == [m if m != "none" else "prompt" for m in asked] + [chosen]
    assert json.loads((tmp_path / MODES_FILE).read_text())[f"openai/gpt-4o-mini@{stub.base_url}"]["mode"] == chosen
    assert gw.ledger.totals()["mode_refusals"] == len(asked) - 1 and gw.ledger.totals()["errors"] == 0


async def test_tool_mode_answer_comes_from_the_tool_call(tmp_path):
    with OpenAIStub(kind="no_response_format") as stub:
        verdict = await _gateway(stub, tmp_path, structured_mode="tool").structured("judge", MESSAGES, Verdict)
        body = stub.requests[0]["body"]
        assert body["tool_choice"]["function"]["name"] == "Verdict" and "response_format" not in body
        assert body["tools"][0]["function"]["parameters"]["properties"]["match_score"]["enum"] == [0, 1, 2]
        assert verdict.match_score in (0, 1, 2)


async def test_concurrent_first_calls_find_the_mode_once(tmp_path):
    with OpenAIStub(kind="llamacpp") as stub:
        gw = _gateway(stub, tmp_path)
        prompts = [[{"role": "user", "content": f"Score answer {i}."}] for i in range(6)]
        results = await asyncio.gather(*(gw.structured("judge", p, Verdict) for p in prompts))
        assert all(isinstance(r, Verdict) for r in results)
        modes = [r["mode"] for r in stub.requests]
        assert modes.count("json_schema") == 1 and modes.count("json_object") == 6


async def test_a_resumed_run_asks_in_the_mode_its_folder_recorded(tmp_path):
    with OpenAIStub(kind="llamacpp") as stub:
        await _gateway(stub, tmp_path).structured("judge", MESSAGES, Verdict)
        ModeMemory.forget_process()  # a new process resuming the same run folder
        await _gateway(stub, tmp_path).structured("judge", [{"role": "user", "content": "Next."}], Verdict)
        assert [r["mode"] for r in stub.requests] == ["json_schema", "json_object", "json_object"]


async def test_the_process_remembers_the_mode_across_gateways(tmp_path):
    with OpenAIStub(kind="no_json_schema") as stub:
        await _gateway(stub, tmp_path / "a").structured("judge", MESSAGES, Verdict)
        await _gateway(stub, tmp_path / "b").structured("judge", [{"role": "user", "content": "Next."}], Verdict)
        assert [r["mode"] for r in stub.requests] == ["json_schema", "json_object", "json_object"]
        recorded = json.loads((tmp_path / "b" / MODES_FILE).read_text())  # the second run's folder says so too
        assert [entry["mode"] for entry in recorded.values()] == ["json_object"]


async def test_a_pinned_mode_is_used_alone_and_its_refusal_is_final(tmp_path):
    with OpenAIStub(kind="llamacpp") as stub:
        assert await _gateway(stub, tmp_path, structured_mode="json_object").structured("judge", MESSAGES, Verdict)
        assert [r["mode"] for r in stub.requests] == ["json_object"]
        with pytest.raises(ModelCallError) as info:
            await _gateway(stub, tmp_path, structured_mode="json_schema").structured("judge", MESSAGES, Verdict)
        assert [r["mode"] for r in stub.requests] == ["json_object", "json_schema"]
        assert "Input should be 'text' or 'json_object'" in str(info.value) and info.value.attempts == 1
        assert info.value.verdict == "refused" and info.value.status == 500


@pytest.mark.parametrize("mode", MODES)
async def test_the_scripted_model_answers_in_every_mode(mode):
    settings = ModelSettings(model="scripted", structured_mode=mode)
    gw = Gateway({"judge": settings})
    verdict = await gw.structured("judge", MESSAGES, Verdict)
    assert isinstance(verdict, Verdict)
    [entry] = gw.ledger.entries
    assert entry.structured_mode == mode and entry.status == "ok"


async def test_scripted_auto_mode_is_json_schema_and_deterministic():
    first = await Gateway({"judge": ModelSettings()}).structured("judge", MESSAGES, Verdict)
    pinned = await Gateway({"judge": ModelSettings(structured_mode="prompt")}).structured("judge", MESSAGES, Verdict)
    assert first == pinned  # the same instance whichever mode asked for it


async def test_an_answer_cut_at_max_tokens_says_so(tmp_path):
    with OpenAIStub() as stub:
        stub.script(["cut", "cut"])
        gw = _gateway(stub, tmp_path, max_tokens=40)
        with pytest.raises(
            ModelCallError, match="cut at max_tokens = 40 before it was complete: raise max_tokens for the judge role"
        ):
            await gw.structured("judge", MESSAGES, Verdict)
    assert [e.finish_reason for e in read_ledger(tmp_path / "ledger.jsonl")] == ["length", "length"]


# ------------------------------------------------------------------ errors no retry can fix


def _one_fast_failure(stub: OpenAIStub, started: float, info) -> None:
    assert len(stub.requests) == 1, [r["behaviour"] for r in stub.requests]
    assert info.value.attempts == 1
    assert time.perf_counter() - started < 15  # no backoff schedule was waited through


@pytest.mark.parametrize("call", ["text", "structured"])
async def test_bad_credentials_fail_at_once_with_the_servers_message(tmp_path, call):
    with OpenAIStub(api_key="sk-right") as stub:
        gw = _gateway(stub, tmp_path, api_key="sk-wrong", max_retries=4)
        started = time.perf_counter()
        with pytest.raises(ModelCallError) as info:
            await (gw.text("judge", MESSAGES) if call == "text" else gw.structured("judge", MESSAGES, Verdict))
        _one_fast_failure(stub, started, info)
        assert "authentication failed (HTTP 401" in str(info.value)
        assert "Incorrect API key provided" in str(info.value) and info.value.verdict == "fatal"
    [entry] = read_ledger(tmp_path / "ledger.jsonl")
    assert entry.status == "error" and "Incorrect API key" in entry.error


@pytest.mark.parametrize("call", ["text", "structured"])
async def test_an_unknown_model_fails_at_once_with_the_servers_message(tmp_path, call):
    with OpenAIStub(models=("served-model",)) as stub:
        gw = _gateway(stub, tmp_path, model="openai/no-such-model", max_retries=4)
        started = time.perf_counter()
        with pytest.raises(ModelCallError) as info:
            await (gw.text("judge", MESSAGES) if call == "text" else gw.structured("judge", MESSAGES, Verdict))
        _one_fast_failure(stub, started, info)
        assert "The model `no-such-model` does not exist" in str(info.value) and info.value.status == 404


async def test_a_validation_error_under_500_is_not_retried(tmp_path):
    with OpenAIStub() as stub:
        stub.script(["invalid500"] * 5)
        gw = _gateway(stub, tmp_path, max_retries=4)
        started = time.perf_counter()
        with pytest.raises(ModelCallError) as info:
            await gw.text("judge", MESSAGES)
        _one_fast_failure(stub, started, info)
        assert "1 validation error for CreateChatCompletionRequest" in str(info.value)


async def test_a_bad_request_is_not_retried(tmp_path):
    with OpenAIStub() as stub:
        stub.script(["400"] * 5)
        gw = _gateway(stub, tmp_path, max_retries=4)
        with pytest.raises(
            ModelCallError, match="request refused \\(HTTP 400, not retried\\): stub: the request is invalid"
        ):
            await gw.text("judge", MESSAGES)
        assert len(stub.requests) == 1


async def test_a_request_refused_in_every_mode_costs_one_request_per_mode(tmp_path):
    with OpenAIStub() as stub:
        stub.script(["400"] * 10)
        gw = _gateway(stub, tmp_path, max_retries=4)
        with pytest.raises(ModelCallError, match="refused every structured output mode") as info:
            await gw.structured("judge", MESSAGES, Verdict)
        assert [r["mode"] for r in stub.requests] == ["json_schema", "json_object", "tool", "none"]
        assert "stub: the request is invalid" in str(info.value)
    statuses = [e.status for e in read_ledger(tmp_path / "ledger.jsonl")]
    assert statuses == ["refused", "refused", "refused", "error"]


async def test_a_plain_500_is_still_retried(tmp_path):
    with OpenAIStub() as stub:
        stub.script(["500", "ok"])
        gw = Gateway(
            {
                "judge": ModelSettings(
                    model="openai/gpt-4o-mini",
                    api_base=stub.base_url,
                    api_key="k",
                    retry_backoff_s=0.01,
                    timeout_s=20.0,
                )
            }
        )
        assert await gw.text("judge", MESSAGES)
        assert [r["behaviour"] for r in stub.requests] == ["500", "ok"]


def test_server_message_drops_litellm_prefixes():
    class Raised(Exception):
        message = "litellm.NotFoundError: NotFoundError: OpenAIException - The model `x` does not exist."

    assert server_message(Raised()) == "The model `x` does not exist."


def test_a_raw_newline_inside_a_json_string_is_accepted():
    """llama.cpp's schema grammars allow raw control characters in strings; strict JSON refuses them."""
    assert extract_json('{"aspects": ["cost\nand time"]}') == {"aspects": ["cost\nand time"]}
