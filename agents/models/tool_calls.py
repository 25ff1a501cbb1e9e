"""Tool calls and foreign JSON schemas, asked through `Gateway.structured`.

External agents send OpenAI requests that carry their own JSON schemas (`response_format`) and
tools to call. The gateway takes pydantic models, so `schema_model` wraps a foreign JSON schema
in one: the model is shown exactly that schema, and its answer is validated against it (with
`jsonschema`) so the gateway's repair turn sees what is wrong. A tool-calling request becomes a
structured request for a `ToolTurn`: some text and zero or more calls, each one of the offered
tools with arguments valid for it. Every model that can answer JSON can so call tools, and the
answer goes through the same cache, retries, repair and ledger as any other.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from pydantic import RootModel, model_validator

# how a tool's result is written when messages are flattened to text (models read it; the scripted
# model looks for it to tell a first tool turn from a later one)
TOOL_RESULT_LEAD = "Result of tool call "


def schema_model(name: str, schema: dict[str, Any]) -> type[RootModel[Any]]:
    """A pydantic model whose JSON schema is `schema` and whose validation is that schema's."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"schema {name!r} is not a valid JSON schema: {exc.message}") from None
    validator = Draft202012Validator(schema)
    frozen = copy.deepcopy(schema)

    class ForeignSchema(RootModel[Any]):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return copy.deepcopy(frozen)

        @model_validator(mode="after")
        def _valid(self) -> ForeignSchema:
            errors = sorted(validator.iter_errors(self.root), key=lambda e: list(e.absolute_path))
            if errors:
                raise ValueError(
                    "; ".join(
                        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors[:5]
                    )
                )
            return self

    ForeignSchema.__name__ = ForeignSchema.__qualname__ = _identifier(name)
    return ForeignSchema


def _identifier(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")
    return cleaned or "Answer"


def _hoist_defs(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` moved into `defs` under `prefix`, and its `$ref`s rewritten."""
    schema = copy.deepcopy(schema)
    local = schema.pop("$defs", {}) | schema.pop("definitions", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
                node = {**node, "$ref": f"#/$defs/{prefix}{ref.rsplit('/', 1)[-1]}"}
            return {key: rewrite(value) for key, value in node.items()}
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    for name, definition in local.items():
        defs[f"{prefix}{name}"] = rewrite(definition)
    return rewrite(schema)


def tool_turn_schema(tools: list[dict[str, Any]], tool_choice: Any = "auto") -> dict[str, Any]:
    """The JSON schema of one assistant turn that may call the offered OpenAI `tools`.

    `tool_choice` follows OpenAI: "auto" (zero or more calls), "required" (at least one), or
    `{"type": "function", "function": {"name": ...}}` (that tool, at least once).
    """
    forced = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    defs: dict[str, Any] = {}
    options = []
    for index, tool in enumerate(tools):
        function = tool.get("function", tool)
        name = function.get("name")
        if not name or (forced and name != forced):
            continue
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        option = {
            "type": "object",
            "properties": {
                "name": {"const": name},
                "arguments": _hoist_defs(parameters, f"t{index}_", defs),
            },
            "required": ["name", "arguments"],
        }
        if function.get("description"):
            option["description"] = str(function["description"])[:1000]
        options.append(option)
    if not options:
        raise ValueError(f"tool_choice names {forced!r}, which is not among the tools offered")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "description": "What you say in this turn (may be empty when you call tools).",
            },
            "tool_calls": {
                "type": "array",
                "description": "The tools to call now, with their arguments; empty to answer without tools.",
                "items": {"anyOf": options} if len(options) > 1 else options[0],
                "minItems": 1 if forced or tool_choice == "required" else 0,
            },
        },
        "required": ["content", "tool_calls"],
    }
    if defs:
        schema["$defs"] = defs
    return schema


TOOL_TURN_NOTE = (
    "Decide your next step: call one or more of the tools described in the schema (with valid "
    "arguments), or, if no tool is needed, give your answer in `content` with an empty `tool_calls`."
)


def tool_call_id(turn_key: str, index: int) -> str:
    """A deterministic id, so a replayed answer gives the agent exactly the same conversation."""
    return "call_" + hashlib.sha256(f"{turn_key}:{index}".encode()).hexdigest()[:24]


def openai_tool_calls(turn: dict[str, Any], turn_key: str) -> list[dict[str, Any]]:
    return [
        {
            "id": tool_call_id(turn_key, index),
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False)},
        }
        for index, call in enumerate(turn.get("tool_calls", []))
    ]


def flatten_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as plain system/user/assistant text: content parts joined, an assistant's
    tool calls and each tool's result written out, so any model (and the cache) sees text."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role", "user")
        text = content_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = "\n".join(
                f"- called {c.get('function', {}).get('name')} (id {c.get('id')}) with "
                f"{c.get('function', {}).get('arguments', '{}')}"
                for c in message["tool_calls"]
            )
            text = f"{text}\n{calls}".strip()
        elif role in ("tool", "function"):
            who = message.get("name") or message.get("tool_call_id") or "tool"
            role, text = "user", f"{TOOL_RESULT_LEAD}{who}:\n{text}"
        elif role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": text})
    return out


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return str(content)
