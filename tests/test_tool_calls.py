"""Foreign JSON schemas and tool calls asked through the gateway (pure functions, no model)."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from atelier.agents.models.scripted import schema_instance
from atelier.agents.models.tool_calls import flatten_messages, openai_tool_calls, schema_model, tool_turn_schema

PLAN = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["steps"],
}


def test_schema_model_shows_and_enforces_the_foreign_schema():
    model = schema_model("Plan", PLAN)
    assert model.model_json_schema() == PLAN and model.__name__ == "Plan"
    assert model.model_validate({"steps": ["a"]}).root == {"steps": ["a"]}
    with pytest.raises(ValidationError, match="steps: \\[\\] should be non-empty"):
        model.model_validate({"steps": []})
    with pytest.raises(ValidationError, match="'steps' is a required property"):
        model.model_validate({"plan": 1})
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        schema_model("Bad", {"type": "no-such-type"})


def _tool(name: str, parameters: dict, description: str = "") -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


SEARCH = _tool(
    "web_search",
    {
        "type": "object",
        "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
        "required": ["queries"],
    },
    "Search the web.",
)
# a pydantic-made schema: its $defs must survive being nested in the turn's schema
PERSON = _tool(
    "save",
    {
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        "type": "object",
        "properties": {"who": {"$ref": "#/$defs/Person"}},
        "required": ["who"],
    },
)


def test_tool_turn_schema_accepts_exactly_valid_calls():
    schema = tool_turn_schema([SEARCH, PERSON])
    Draft202012Validator.check_schema(schema)
    valid = Draft202012Validator(schema)
    assert valid.is_valid(
        {
            "content": "",
            "tool_calls": [
                {"name": "web_search", "arguments": {"queries": ["x"]}},
                {"name": "save", "arguments": {"who": {"name": "Ada"}}},
            ],
        }
    )
    assert valid.is_valid({"content": "no tools needed", "tool_calls": []})  # auto: answering is allowed
    assert not valid.is_valid({"content": "", "tool_calls": [{"name": "save", "arguments": {"who": {}}}]})
    assert not valid.is_valid({"content": "", "tool_calls": [{"name": "delete_all", "arguments": {}}]})
    assert schema["$defs"] == {"t1_Person": PERSON["function"]["parameters"]["$defs"]["Person"]}


def test_tool_choice_required_and_forced():
    assert tool_turn_schema([SEARCH, PERSON], "required")["properties"]["tool_calls"]["minItems"] == 1
    forced = tool_turn_schema([SEARCH, PERSON], {"type": "function", "function": {"name": "save"}})
    assert forced["properties"]["tool_calls"]["items"]["properties"]["name"] == {"const": "save"}
    with pytest.raises(ValueError, match="'nope'"):
        tool_turn_schema([SEARCH], {"type": "function", "function": {"name": "nope"}})


def test_the_scripted_model_answers_tool_turns_with_valid_calls():
    schema = tool_turn_schema([SEARCH, PERSON], "required")
    validator = Draft202012Validator(schema)
    for seed in range(20):
        instance = schema_instance(schema, [{"role": "user", "content": f"find things {seed}"}], seed)
        assert validator.is_valid(instance) and instance["tool_calls"]


def test_openai_tool_calls_have_deterministic_ids_and_json_arguments():
    turn = {"content": "", "tool_calls": [{"name": "web_search", "arguments": {"queries": ["café"]}}]}
    first, again = openai_tool_calls(turn, "k"), openai_tool_calls(turn, "k")
    assert (
        first == again
        and first[0]["id"].startswith("call_")
        and first[0]["id"] != openai_tool_calls(turn, "j")[0]["id"]
    )
    assert json.loads(first[0]["function"]["arguments"]) == {"queries": ["café"]}


def test_flatten_messages_writes_tool_traffic_as_text():
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {}}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "web_search", "arguments": '{"queries": ["x"]}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result text"},
    ]
    assert flatten_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": '- called web_search (id c1) with {"queries": ["x"]}'},
        {"role": "user", "content": "Result of tool call c1:\nresult text"},
    ]
