"""The offline model `scripted`: deterministic, networkless, and a fault injector.

It is a litellm custom provider, so scripted calls travel exactly the path real ones do (cache,
retries, repair, ledger). Given the same request it always answers the same:

- a structured request gets a schema-valid instance whose values are seeded by the hash of the
  request, in whichever structured mode it was asked (a `response_format` carrying the schema, a
  forced tool call, or the schema in the prompt only);
- any other request gets text composed deterministically from the prompt's own material, headed
  `DRY RUN`, so nothing it produces can be mistaken for a real model's work.

Parameters ride on the model string, e.g. `scripted?latency_ms=50&error_rate=0.1&seed=3`:
`latency_ms` (sleep per call), `error_rate` (share of calls failing with 429/500/503, decided per
attempt so retries can succeed), `malformed_rate` (share of structured answers that are broken
JSON, to exercise repair), `seed`. A request's own `seed` (a role's `seed`) is mixed in, so
repeats asked with different seeds get different samples.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import re
import threading
from collections import Counter
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.agents.models.tool_calls import TOOL_RESULT_LEAD
from atelier.agents.prompts import JSON_INSTRUCTIONS_LEAD, schema_in_instructions

DRY_RUN_MARK = "DRY RUN"
# Raised whenever what the scripted model answers changes (it keys the response cache): 2 quotes the
# judged text in fields that ask for a quote, and names the prompt's URLs in URL fields; 3 starts
# a tool-using agent's work on its first tool turn (`first_tool_move`).
ANSWERS_VERSION = 3
PROVIDER = "scripted"


class ScriptedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # parse_model_string hands out one instance per string

    # allow_inf_nan=False: `latency_ms=inf` (or nan) would pass `ge=0` and sleep forever
    latency_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    error_rate: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    malformed_rate: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    seed: int = 0

    def answer_identity(self) -> dict[str, Any]:
        """The parameters that change what is answered (latency and errors do not), and the version of
        the answering itself, so a cache never serves what an earlier scripted model wrote."""
        return {"malformed_rate": self.malformed_rate, "seed": self.seed, "version": ANSWERS_VERSION}


@functools.lru_cache(maxsize=64)  # read twice per call by the gateway
def parse_model_string(model: str) -> ScriptedParams:
    """`scripted`, `scripted?k=v&...` or `scripted/<name>?k=v` -> its parameters. A parameter that
    is unknown, repeated or out of range is a ValueError naming it."""
    _, _, query = model.partition("?")
    known = ", ".join(ScriptedParams.model_fields)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        raise ValueError(f"{model!r}: parameters must be key=value pairs joined by '&' ({known})") from None
    raw = dict(pairs)
    if len(raw) < len(pairs):
        raise ValueError(f"{model!r}: a parameter is given twice")
    try:
        return ScriptedParams.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: "
            + ("unknown parameter" if err["type"] == "extra_forbidden" else err["msg"])
            for err in exc.errors()
        )
        raise ValueError(f"{model!r}: {problems} (parameters: {known})") from None


# ----------------------------------------------------------------------------- determinism


def _digest(*parts: Any) -> bytes:
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(blob).digest()


def _rng(*parts: Any) -> random.Random:
    return random.Random(int.from_bytes(_digest(*parts)[:8], "big"))


def _unit(*parts: Any) -> float:
    return int.from_bytes(_digest(*parts)[:8], "big") / 2**64


def request_digest(messages: list[dict[str, Any]], schema: dict[str, Any] | None, seed: int) -> str:
    return _digest(messages, schema, seed).hex()


# ----------------------------------------------------------------------------- prompt material

_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"[^\W\d_][\w'-]{2,}", re.UNICODE)


def _message_text(message: dict[str, Any]) -> str:
    """A message's text without the gateway's JSON-schema instructions (not prompt material)."""
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content).split(JSON_INSTRUCTIONS_LEAD, 1)[0]


_STOPWORDS = frozenset(
    "the and for that this with from your you are was were have has had not but can will what which who whom "
    "when where how why their there them they then than into onto about over under more most some such only "
    "also very just like each other any all its it's our out use used using does did doing been being would "
    "could should user user's answer question".split()
)


def prompt_material(messages: list[dict[str, Any]]) -> list[str]:
    """Sentences from the non-system messages, in order, de-duplicated, headings left out."""
    seen: set[str] = set()
    out: list[str] = []
    for message in messages:
        if message.get("role") == "system":
            continue
        for sentence in _SENTENCE.split(_message_text(message)):
            if sentence.lstrip().startswith("#"):
                continue
            sentence = sentence.strip(" -*>`|\t")
            if len(sentence) >= 12 and sentence not in seen and not sentence.startswith(("{", "}", "<")):
                seen.add(sentence)
                out.append(sentence)
    return out


def compose_text(
    messages: list[dict[str, Any]], seed: int, lead: str = f"{DRY_RUN_MARK}: scripted answer (no model was called)."
) -> str:
    """A deterministic answer built from the prompt's own sentences."""
    material = prompt_material(messages)
    rng = _rng("text", messages, seed)
    picked = sorted(rng.sample(range(len(material)), k=min(len(material), 6))) if material else []
    words = Counter(
        w.lower()
        for m in messages
        if m.get("role") != "system"
        for w in _WORD.findall(_message_text(m))
        if len(w) > 3 and w.lower() not in _STOPWORDS
    )
    topics = ", ".join(w for w, _ in words.most_common(5))
    lines = [lead, ""]
    if topics:
        lines.append(f"Key terms: {topics}.")
    lines.extend(f"- {material[i]}" for i in picked)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- schema instances


# A string field that asks for text copied from the material ("copied from it", "verbatim", "quote")
# gets a run of the judged text's own words, so a judge's gate for quotes not in the response sees
# what a faithful model would give; a URL field gets a URL the prompt names, or none.
_QUOTE_FIELD = re.compile(r"copied from|verbatim|word for word|quot(e|ed|ing)\b|exact span", re.IGNORECASE)
_URL_FIELD = re.compile(r"\burl\b|\blink\b", re.IGNORECASE)
_URL = re.compile(r"https?://[^\s<>\]\[)\"']+")
_JUDGED = re.compile(r"respon|report|answer", re.IGNORECASE)
_DATA_BLOCK = re.compile(r"^# (?P<title>[^\n]*)\n<data>\n(?P<body>.*?)\n</data>", re.MULTILINE | re.DOTALL)


def _judged_text(messages: list[dict[str, Any]]) -> str:
    """The material a prompt asks about: the last untrusted section titled as a response or report."""
    blocks = [
        m
        for message in messages
        if message.get("role") != "system"
        for m in _DATA_BLOCK.finditer(_message_text(message))
    ]
    judged = [b["body"] for b in blocks if _JUDGED.search(b["title"])]
    return judged[-1] if judged else ""


class _InstanceBuilder:
    """A JSON-schema instance generator for the schemas pydantic emits."""

    def __init__(
        self,
        schema: dict[str, Any],
        rng: random.Random,
        words: list[str],
        *,
        judged: str = "",
        urls: list[str] | None = None,
    ) -> None:
        self.defs = schema.get("$defs", {}) | schema.get("definitions", {})
        self.rng = rng
        self.words = words or ["dry", "run", "scripted", "answer"]
        self.judged = judged.split()  # the judged text's words, with their punctuation
        self.urls = urls or []

    def build(self, node: dict[str, Any], depth: int = 0) -> Any:
        if "$ref" in node:
            return self.build(self.defs[node["$ref"].split("/")[-1]], depth)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return self.rng.choice(node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                options = [o for o in node[key] if o.get("type") != "null"] or node[key]
                return self.build(self.rng.choice(options), depth)
        if "allOf" in node:
            merged: dict[str, Any] = {}
            for part in node["allOf"]:
                merged.update(self.defs[part["$ref"].split("/")[-1]] if "$ref" in part else part)
            return self.build(merged, depth)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or "properties" in node:
            return {
                name: self.build({"title": name, **sub}, depth + 1) for name, sub in node.get("properties", {}).items()
            }
        if kind == "array":
            low = node.get("minItems", 1 if depth < 3 else 0)
            high = max(low, min(node.get("maxItems", low + 3), low + 3))
            items = node.get("items", {"type": "string"})
            return [self.build(items, depth + 1) for _ in range(self.rng.randint(low, high))]
        if kind == "string":
            return self._string(node)
        if kind == "integer":
            low, high = self._bounds(node, 0, 10)
            return self.rng.randint(int(low), int(high))
        if kind == "number":
            low, high = self._bounds(node, 0.0, 1.0)
            return round(self.rng.uniform(low, high), 3)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self._string(node)

    @staticmethod
    def _bounds(node: dict[str, Any], low: float, high: float) -> tuple[float, float]:
        if "minimum" in node:
            low = node["minimum"]
        if "exclusiveMinimum" in node:
            low = node["exclusiveMinimum"] + (1 if node.get("type") == "integer" else 1e-6)
        if "maximum" in node:
            high = node["maximum"]
        if "exclusiveMaximum" in node:
            high = node["exclusiveMaximum"] - (1 if node.get("type") == "integer" else 1e-6)
        if "minimum" in node and "maximum" not in node and "exclusiveMaximum" not in node:
            high = max(high, low + 10)
        return low, max(low, high)

    def _string(self, node: dict[str, Any]) -> str:
        if node.get("format") == "date-time":
            return "2026-01-01T00:00:00Z"
        if node.get("format") == "date":
            return "2026-01-01"
        low = node.get("minLength", 1)
        high = node.get("maxLength", 400)
        about = f"{node.get('title', '')} {node.get('description', '')}"
        if self.judged and _QUOTE_FIELD.search(about):
            n = min(len(self.judged), self.rng.randint(3, 8))
            start = self.rng.randint(0, len(self.judged) - n)
            quote = " ".join(self.judged[start : start + n])
            if low <= len(quote) <= high:
                return quote
        if _URL_FIELD.search(str(node.get("title", ""))) or node.get("format") == "uri":
            return (
                self.rng.choice(self.urls)
                if self.urls
                else ("" if not node.get("minLength") else "https://example.invalid/")
            )
        n = self.rng.randint(3, 9)
        text = " ".join(self.rng.choice(self.words) for _ in range(n)).capitalize()
        text = f"{DRY_RUN_MARK}: {text}" if high >= 40 else text
        while len(text) < low:
            text += " " + self.rng.choice(self.words)
        return text[:high]


def schema_instance(schema: dict[str, Any], messages: list[dict[str, Any]], seed: int) -> Any:
    texts = [_message_text(m) for m in messages if m.get("role") != "system"]
    words = [w for text in texts for w in _WORD.findall(text)]
    urls = list(dict.fromkeys(u.rstrip(".,;:") for text in texts for u in _URL.findall(text)))
    return _InstanceBuilder(
        schema, _rng("instance", messages, schema, seed), words[:400], judged=_judged_text(messages), urls=urls
    ).build(schema)


def _tool_options(schema: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The offered tools of a tool-turn schema (`agents.models.tool_calls.tool_turn_schema`), else None."""
    props = schema.get("properties") or {}
    if set(props) != {"content", "tool_calls"}:
        return None
    items = (props["tool_calls"] or {}).get("items") or {}
    options = items.get("anyOf") or [items]
    if not all(((o.get("properties") or {}).get("name") or {}).get("const") for o in options):
        return None
    return options


def _arguments_schema(option: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    arguments = (option.get("properties") or {}).get("arguments") or {}
    if "$ref" in arguments:
        arguments = defs.get(arguments["$ref"].split("/")[-1], {})
    return arguments


def first_tool_move(schema: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """On a tool turn before any tool has answered, the schema narrowed to one call of the first
    offered tool that takes arguments, each required list given at least one item: a scripted agent
    starts working (a tool without arguments, "done" or "complete", is a signal, not a first step;
    an empty list of queries is no search). None: not a first tool turn; later turns are sampled
    from the whole schema, as any request is."""
    options = _tool_options(schema)
    answered = (m.get("role") in ("tool", "function") or TOOL_RESULT_LEAD in _message_text(m) for m in messages)
    if options is None or any(answered):
        return None
    defs = schema.get("$defs", {})
    working = [(o, a) for o in options if (a := _arguments_schema(o, defs)).get("required") or a.get("properties")]
    if not working:
        return None
    option, arguments = working[0]
    required = set(arguments.get("required") or [])
    properties = {
        name: {**sub, "minItems": max(1, sub.get("minItems", 0))}
        if name in required and sub.get("type") == "array"
        else sub
        for name, sub in (arguments.get("properties") or {}).items()
    }
    move = {**option, "properties": {**option["properties"], "arguments": {**arguments, "properties": properties}}}
    calls = {**schema["properties"]["tool_calls"], "items": move, "minItems": 1, "maxItems": 1}
    return {**schema, "properties": {**schema["properties"], "tool_calls": calls}}


def schema_from_response_format(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_schema":
        return response_format.get("json_schema", {}).get("schema")
    return response_format.get("schema")


def forced_tool(params: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
    """The (name, parameters schema) of the one function a request forces the model to call (the
    name None when neither the choice nor the tool names it)."""
    choice = params.get("tool_choice")
    if not isinstance(choice, dict):
        return None
    name = (choice.get("function") or {}).get("name")
    for tool in params.get("tools") or []:
        function = tool.get("function") or {}
        if function.get("name") == name:
            return name, function.get("parameters") or {"type": "object"}
    return None


def requested_schema(
    params: dict[str, Any], messages: list[dict[str, Any]]
) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON schema a request asks the answer to follow, and the tool to answer through (if one
    is forced); the schema is looked for in `response_format`, then a forced tool, then the prompt."""
    response_format = params.get("response_format")
    if isinstance(response_format, dict):
        return schema_from_response_format(response_format) or {"type": "object"}, None
    tool = forced_tool(params)
    if tool is not None:
        return tool[1], tool[0]
    return schema_in_instructions(messages), None


# ----------------------------------------------------------------------------- the provider


def token_estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _raw_text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return json.dumps(content) if isinstance(content, list) else str(content)


class ScriptedLLM:
    """litellm CustomLLM handler for the `scripted/...` provider."""

    def __init__(self) -> None:
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _next_attempt(self, key: str) -> int:
        with self._lock:
            self._attempts[key] += 1
            return self._attempts[key]

    def forget_attempts(self) -> None:
        with self._lock:
            self._attempts.clear()

    def answer(
        self, messages: list[dict[str, Any]], optional_params: dict[str, Any]
    ) -> tuple[str, ScriptedParams, str | None]:
        """The answer's text, the parameters, and the tool it is a call of (None: plain content)."""
        params = ScriptedParams.model_validate((optional_params.get("extra_body") or {}).get("scripted", {}))
        # the request's seed draws another sample, as a sampling provider's would (a judge's repeats
        # differ); seed 0 (the default) answers as the model string's seed alone
        params = params.model_copy(update={"seed": params.seed * 1_000_003 + int(optional_params.get("seed") or 0)})
        schema, tool = requested_schema(optional_params, messages)
        # keyed on the schema alone, not on the mode it came in: every mode gets the same instance
        key = request_digest(messages, schema, params.seed)
        attempt = self._next_attempt(key)
        if params.error_rate and _unit("error", key, attempt) < params.error_rate:
            from litellm.llms.custom_llm import CustomLLMError

            status = (429, 500, 503)[int(_unit("status", key, attempt) * 3)]
            raise CustomLLMError(status_code=status, message=f"scripted fault injection ({status})")
        if schema is None:
            return compose_text(messages, params.seed), params, None
        instance = schema_instance(first_tool_move(schema, messages) or schema, messages, params.seed)
        content = json.dumps(instance, ensure_ascii=False)
        if params.malformed_rate and _unit("malformed", key) < params.malformed_rate:
            content = content[: max(1, len(content) // 2)]  # truncated JSON: the repair path must cope
        return content, params, tool


def _make_handler():
    import litellm
    from litellm import CustomLLM

    core = ScriptedLLM()

    class _Handler(CustomLLM):
        scripted = core

        def _fill(self, model_response, messages, optional_params):
            content, params, tool = core.answer(messages, optional_params)
            prompt_tokens = sum(token_estimate(_raw_text(m)) for m in messages)
            if tool is None:
                model_response.choices[0].message.content = content
            else:
                from litellm.types.utils import ChatCompletionMessageToolCall, Function

                call = ChatCompletionMessageToolCall(
                    function=Function(name=tool, arguments=content), id="call_scripted"
                )
                model_response.choices[0].message.content = None
                model_response.choices[0].message.tool_calls = [call]
                model_response.choices[0].finish_reason = "tool_calls"
            model_response.model = "scripted"
            # a dry run costs nothing; said here, litellm skips pricing the call twice (~0.5 ms of CPU)
            model_response._hidden_params["response_cost"] = 0.0
            model_response.usage = litellm.Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=token_estimate(content),
                total_tokens=prompt_tokens + token_estimate(content),
            )
            return model_response, params

        def completion(
            self,
            model,
            messages,
            api_base,
            custom_prompt_dict,
            model_response,
            print_verbose,
            encoding,
            api_key,
            logging_obj,
            optional_params,
            *args,
            **kwargs,
        ):
            response, params = self._fill(model_response, messages, optional_params)
            if params.latency_ms:
                import time

                time.sleep(params.latency_ms / 1000)
            return response

        async def acompletion(
            self,
            model,
            messages,
            api_base,
            custom_prompt_dict,
            model_response,
            print_verbose,
            encoding,
            api_key,
            logging_obj,
            optional_params,
            *args,
            **kwargs,
        ):
            response, params = self._fill(model_response, messages, optional_params)
            if params.latency_ms:
                await asyncio.sleep(params.latency_ms / 1000)
            return response

        async def astreaming(
            self,
            model,
            messages,
            api_base,
            custom_prompt_dict,
            model_response,
            print_verbose,
            encoding,
            api_key,
            logging_obj,
            optional_params,
            *args,
            **kwargs,
        ):
            """The same answer, one word per chunk (`latency_ms` before the first)."""
            content, params, _ = core.answer(messages, optional_params)
            if params.latency_ms:
                await asyncio.sleep(params.latency_ms / 1000)
            words = content.split(" ")
            prompt_tokens = sum(token_estimate(_raw_text(m)) for m in messages)
            for i, word in enumerate(words):
                last = i == len(words) - 1
                usage = (
                    {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": token_estimate(content),
                        "total_tokens": prompt_tokens + token_estimate(content),
                    }
                    if last
                    else None
                )
                yield {
                    "text": word if i == 0 else " " + word,
                    "is_finished": last,
                    "finish_reason": "stop" if last else "",
                    "usage": usage,
                    "index": 0,
                    "tool_use": None,
                }

    return _Handler()


_registered = False
_register_lock = threading.Lock()


def forget_attempts() -> None:
    """Count every request's attempts afresh, as in a new process: faults (`error_rate`) are drawn
    per request and attempt, so what one test asked before would otherwise decide another's."""
    if not _registered:
        return
    import litellm

    for item in litellm.custom_provider_map:
        core = getattr(item.get("custom_handler"), "scripted", None)
        if item.get("provider") == PROVIDER and isinstance(core, ScriptedLLM):
            core.forget_attempts()


def register_with_litellm() -> None:
    """Make `scripted/...` a litellm provider (idempotent)."""
    global _registered
    with _register_lock:
        if _registered:
            return
        import litellm

        litellm.custom_provider_map = [
            item for item in litellm.custom_provider_map if item.get("provider") != PROVIDER
        ] + [{"provider": PROVIDER, "custom_handler": _make_handler()}]
        from litellm.utils import custom_llm_setup

        custom_llm_setup()
        # priced at zero: litellm otherwise looks an unknown model's price up through its regex
        # generalizations on every call (~1.5 ms of CPU, most of a scripted call's overhead)
        litellm.register_model(
            {
                f"{PROVIDER}/{PROVIDER}": {
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": PROVIDER,
                    "mode": "chat",
                }
            }
        )
        _registered = True
