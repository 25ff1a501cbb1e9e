"""The local model's own OpenAI-compatible server (agents/models/llama_engine.py) on the real
SmolLM2 weights: what it serves, what it refuses by name, and that its prompt-state cache changes
no answer."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from atelier.agents.models.llama_engine import ChatRequest, Engine, PromptStates, common_prefix, create_app
from atelier.agents.models.local_model import N_BATCH, bundled_gguf
from tests.test_local_model import local_model_installed  # noqa: F401 (autouse: skips, or fails in CI, without the extra)

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "rank": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
    "required": ["city", "rank"],
}


@pytest.fixture(scope="module")
def engine():
    return Engine(str(bundled_gguf("smollm2")), "smollm2", n_ctx=1024, threads=1, n_batch=N_BATCH, cache_bytes=64 << 20)


def ask(content: str, **options) -> ChatRequest:
    return ChatRequest.model_validate({"messages": [{"role": "user", "content": content}], "temperature": 0, **options})


def test_an_answer_resumed_from_a_cached_prompt_state_is_the_answer_from_scratch(engine):
    questions = [f"Name one famous sight of {city}." for city in ("Paris", "Rome", "Oslo")]
    fresh = []
    for question in questions:
        engine._tokens, engine._states = [], PromptStates(0)  # nothing to resume from
        engine.context.memory_seq_rm(0, -1, -1)
        fresh.append(engine.complete(ask(question, max_tokens=12)).text)
    engine._states = PromptStates(64 << 20)
    interleaved = [engine.complete(ask(q, max_tokens=12)).text for q in questions + questions[::-1]]
    assert interleaved == fresh + fresh[::-1]


def test_structured_answers_follow_the_schema_in_both_response_formats(engine):
    for form in (
        {"type": "json_schema", "json_schema": {"name": "Capital", "schema": SCHEMA}},
        {"type": "json_object", "schema": SCHEMA},
    ):
        done = engine.complete(ask("Name the capital of France.", max_tokens=40, response_format=form))
        answer = json.loads(done.text)
        assert done.finish_reason == "stop" and set(answer) == {"city", "rank"}
        assert isinstance(answer["city"], str) and (answer["rank"] is None or isinstance(answer["rank"], int))


def test_the_http_api_answers_streams_and_refuses_by_name(engine):
    client = TestClient(create_app(engine))
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["smollm2"]
    body = {"messages": [{"role": "user", "content": "Say hi."}], "temperature": 0, "max_tokens": 6}
    answer = client.post("/v1/chat/completions", json=body).json()
    usage = answer["usage"]
    assert usage["completion_tokens"] == 6 and answer["choices"][0]["finish_reason"] == "length"
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as events:
        chunks = [json.loads(line[6:]) for line in events.iter_lines() if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == answer["choices"][0]["message"]["content"] and chunks[-1]["usage"] == usage
    refusals = {
        "tools": {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        "response_format type 'xml'": {"response_format": {"type": "xml"}},
        "n: Input should be 1": {"n": 2},
        "maximum context length is 1024 tokens": {"messages": [{"role": "user", "content": "tram " * 1200}]},
    }
    for said, change in refusals.items():
        refused = client.post("/v1/chat/completions", json={**body, **change})
        assert refused.status_code == 400 and said in refused.json()["error"]["message"], refused.json()


def test_a_stop_string_ends_the_answer_before_it(engine):
    question = "Count from one to ten."
    whole = engine.complete(ask(question, max_tokens=30)).text
    stop = whole[6:9]  # a few characters from the middle of the answer, wherever they stand
    done = engine.complete(ask(question, max_tokens=30, stop=[stop, "never said"]))
    assert (done.text, done.finish_reason) == (whole[: whole.index(stop)], "stop")


def test_the_common_prefix():
    assert common_prefix((1, 2, 3), [1, 2, 4]) == 2 and common_prefix((), [1]) == 0 and common_prefix((1,), [1]) == 1
