"""The gateway as an OpenAI-compatible endpoint, called with the official `openai` client: text,
the agent's own JSON schemas, tool calls, streaming, embeddings, errors, and the ledger's tags —
over the scripted model and over a real HTTP provider (the stub server)."""

from __future__ import annotations

import json

import openai
import pytest
from jsonschema import Draft202012Validator

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.openai_api import EndpointSession
from atelier.agents.models.settings import ModelSettings
from atelier.graphs.external.endpoint import AgentEndpoint
from tests.openai_stub import OpenAIStub

PLAN = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["steps"],
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
            "required": ["queries"],
        },
    },
}


@pytest.fixture
def endpoint():
    server = AgentEndpoint(with_mcp=False).start()
    yield server
    server.stop()


def _session(endpoint: AgentEndpoint, gateway: Gateway, **kwargs) -> EndpointSession:
    session = EndpointSession(
        gateway=gateway, agent="odr", tags={"case": "c1", "system": "s1"}, roles={"final_report": "writer"}, **kwargs
    )
    return endpoint.sessions.add(session)


def _client(endpoint: AgentEndpoint, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.openai_base, api_key=token, max_retries=0)


def test_text_schema_tools_and_streaming_go_through_the_gateway(endpoint, tmp_path):
    gateway = Gateway(cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None, run_id="r1"))
    session = _session(endpoint, gateway)
    client = _client(endpoint, session.token)
    ask = [{"role": "user", "content": "Tell me about Alan Turing and the Turing machine."}]

    text = client.chat.completions.create(model="final_report", messages=ask)
    assert text.choices[0].message.content.startswith("DRY RUN") and text.choices[0].finish_reason == "stop"

    planned = client.chat.completions.create(
        model="research",
        messages=ask,
        response_format={"type": "json_schema", "json_schema": {"name": "Plan", "schema": PLAN, "strict": True}},
    )
    assert Draft202012Validator(PLAN).is_valid(json.loads(planned.choices[0].message.content))

    called = client.chat.completions.create(model="research", messages=ask, tools=[SEARCH], tool_choice="required")
    calls = called.choices[0].message.tool_calls
    assert called.choices[0].finish_reason == "tool_calls" and calls
    assert all(
        c.function.name == "web_search" and isinstance(json.loads(c.function.arguments)["queries"], list) for c in calls
    )
    again = client.chat.completions.create(model="research", messages=ask, tools=[SEARCH], tool_choice="required")
    assert [c.id for c in again.choices[0].message.tool_calls] == [c.id for c in calls]  # replay: same conversation

    stream = client.chat.completions.create(
        model="final_report", messages=ask, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text.choices[0].message.content
    assert chunks[-1].usage.total_tokens > 0

    entries = gateway.ledger.entries
    assert [(e.node, e.role, e.kind, e.cache_hit) for e in entries] == [
        ("odr:final_report", "writer", "text", False),
        ("odr:research", "system", "structured", False),
        ("odr:research", "system", "structured", False),
        ("odr:research", "system", "structured", True),
        ("odr:final_report", "writer", "text", True),
    ]
    assert all(e.case_id == "c1" and e.system == "s1" and e.run_id == "r1" for e in entries)
    assert dict(session.calls) == {"final_report": 2, "research": 3}


def test_embeddings_use_the_local_embedder_through_the_cache(endpoint, tmp_path):
    gateway = Gateway(cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None))
    client = _client(endpoint, _session(endpoint, gateway).token)
    first = client.embeddings.create(model="local", input=["a cat sat on the mat", "quantum chromodynamics"])
    again = client.embeddings.create(model="local", input=["a cat sat on the mat", "quantum chromodynamics"])
    assert [len(d.embedding) for d in first.data] == [384, 384]
    assert [d.embedding for d in again.data] == [d.embedding for d in first.data]
    assert [(e.kind, e.cache_hit) for e in gateway.ledger.entries] == [("embedding", False), ("embedding", True)]


def test_unknown_keys_bad_requests_and_model_failures_are_clear_errors(endpoint, tmp_path):
    gateway = Gateway(
        {"system": ModelSettings(model="scripted?error_rate=1", max_retries=1, retry_backoff_s=0.001)},
        ledger=Ledger(None),
    )
    session = _session(endpoint, gateway)
    with pytest.raises(openai.AuthenticationError, match="unknown API key"):
        _client(endpoint, "not-a-session").chat.completions.create(
            model="x", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        _client(endpoint, session.token).chat.completions.create(model="x", messages=[])
    with pytest.raises(openai.BadRequestError, match="not a valid JSON schema"):
        _client(endpoint, session.token).chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "B", "schema": {"type": "nope"}}},
        )
    client = openai.OpenAI(base_url=endpoint.openai_base, api_key=session.token, max_retries=3)
    with pytest.raises(openai.APIStatusError, match="after 2 attempts") as failed:
        client.chat.completions.create(model="research", messages=[{"role": "user", "content": "x"}])
    assert failed.value.status_code == 502 and failed.value.response.headers["x-should-retry"] == "false"
    assert len(gateway.ledger.entries) == 1 and gateway.ledger.entries[0].status == "error"  # the client did not retry
    assert session.errors


def test_a_real_http_provider_behind_the_endpoint(endpoint, tmp_path):
    with OpenAIStub() as stub:
        settings = ModelSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test")
        gateway = Gateway({"system": settings}, ledger=Ledger(None))
        client = _client(endpoint, _session(endpoint, gateway).token)
        answer = client.chat.completions.create(
            model="research",
            messages=[{"role": "user", "content": "Plan a trip"}],
            response_format={"type": "json_schema", "json_schema": {"name": "Plan", "schema": PLAN}},
        )
        assert Draft202012Validator(PLAN).is_valid(json.loads(answer.choices[0].message.content))
        assert stub.requests and stub.requests[-1]["body"]["model"] == "stub-model"
        entry = gateway.ledger.entries[-1]
        assert entry.node == "odr:research" and entry.model == "openai/stub-model" and entry.prompt_tokens > 0


def test_a_litellm_embedding_model_embeds_over_http_without_litellm_logging(endpoint, tmp_path, monkeypatch):
    """`embedder = "openai/..."` with `embedder_api_base`: litellm's real HTTP path (here to this
    endpoint's local embedder), without litellm's own logging while no callback consumes it."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    from atelier.agents.models.embeddings import LiteLLMEmbedder

    logged = []
    monkeypatch.setattr(Logging, "success_handler", lambda self, *a, **k: logged.append("success"))
    gateway = Gateway(cache=ResponseCache(tmp_path / "llm"), ledger=Ledger(None, run_id="r1"))
    session = _session(endpoint, gateway)
    embedder = LiteLLMEmbedder("openai/local", api_base=endpoint.openai_base, api_key=session.token, batch_size=2)
    vectors = embedder.embed(["a cat sat on the mat", "a kitten sat on a rug", "quantum chromodynamics"])
    assert vectors.shape == (3, 384)
    assert abs(float((vectors**2).sum(axis=1).max()) - 1.0) < 1e-5
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])  # the cats are closer
    assert [e.kind for e in gateway.ledger.entries] == ["embedding", "embedding"]  # two batches
    assert logged == []


TREE = {
    "$defs": {
        "Node": {"type": "object", "properties": {"label": {"type": "string"}, "child": {"$ref": "#/$defs/Node"}}}
    },
    "$ref": "#/$defs/Node",
}
OUTLINE = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "sections": {"type": "array", "items": {"$ref": "#"}}},
}


def test_a_recursive_schema_is_refused_at_once_without_a_model_call(endpoint):
    gateway = Gateway(ledger=Ledger(None))
    session = _session(endpoint, gateway)
    client = openai.OpenAI(base_url=endpoint.openai_base, api_key=session.token, max_retries=3)
    ask = [{"role": "user", "content": "Outline a report."}]
    with pytest.raises(
        openai.BadRequestError,
        match=r"schema 'Tree' cannot be used: it is recursive: "
        r"\$ref #/\$defs/Node -> #/\$defs/Node",
    ) as refused:
        client.chat.completions.create(
            model="research",
            messages=ask,
            response_format={"type": "json_schema", "json_schema": {"name": "Tree", "schema": TREE}},
        )
    assert refused.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.BadRequestError, match=r"tool 'outline' cannot be used: it is recursive: \$ref # -> #"):
        client.chat.completions.create(
            model="research",
            messages=ask,
            tools=[{"type": "function", "function": {"name": "outline", "parameters": OUTLINE}}],
        )
    assert gateway.ledger.entries == []  # refused before any model was asked
    shared = {
        "$defs": {"Step": {"type": "string"}},
        "type": "object",
        "required": ["first", "then"],
        "properties": {"first": {"$ref": "#/$defs/Step"}, "then": {"type": "array", "items": {"$ref": "#/$defs/Step"}}},
    }
    answered = client.chat.completions.create(
        model="research",
        messages=ask,
        response_format={"type": "json_schema", "json_schema": {"name": "Steps", "schema": shared}},
    )
    assert Draft202012Validator(shared).is_valid(json.loads(answered.choices[0].message.content))


def test_schema_problems_are_found_by_a_bounded_walk():
    from atelier.agents.models.openai_api import MAX_SCHEMA_DEPTH, schema_problem

    cycle = {
        "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}},
        "$ref": "#/$defs/A",
    }
    assert schema_problem(cycle) == "it is recursive: $ref #/$defs/A -> #/$defs/B -> #/$defs/A"
    assert schema_problem({"properties": {"x": {"$ref": "#/$defs/Missing"}}}).startswith(
        "$ref '#/$defs/Missing' does not resolve"
    )
    assert "does not resolve" in schema_problem({"$ref": "https://example.com/schema.json"})
    deep: dict = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "array", "items": deep}
    assert schema_problem(deep) == f"it is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    # what passes: shared (not recursive) refs, an escaped pointer, and "$ref" inside data
    many = {
        "$defs": {"a/b": {"type": "string"}},
        "properties": {str(i): {"$ref": "#/$defs/a~1b"} for i in range(50)} | {"c": {"const": {"$ref": "#/nowhere"}}},
    }
    assert schema_problem(many) is None
    assert schema_problem(PLAN) is None and schema_problem(SEARCH["function"]["parameters"]) is None


def test_a_deeply_nested_body_and_a_missing_key_are_clear_errors(endpoint):
    import httpx

    session = _session(endpoint, Gateway(ledger=Ledger(None)))
    auth = {"Authorization": f"Bearer {session.token}"}
    nested = httpx.post(f"{endpoint.openai_base}/chat/completions", content=b"[" * 100_000, headers=auth, timeout=30)
    assert nested.status_code == 400 and "nested too deeply" in nested.json()["error"]["message"]
    assert httpx.get(f"{endpoint.openai_base}/models", timeout=30).status_code == 401
    listed = httpx.get(f"{endpoint.openai_base}/models", headers=auth, timeout=30).json()
    assert [m["id"] for m in listed["data"]] == ["default", "final_report"]
