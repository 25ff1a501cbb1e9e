"""Structured output modes, strongest first, and which one each endpoint accepts.

Servers differ in how they can be held to a JSON schema:

    json_schema   response_format {"type": "json_schema", ...}        OpenAI, vLLM, LM Studio, Ollama
    json_object   response_format {"type": "json_object", "schema"}   llama.cpp (grammar-constrained)
    tool          one forced function call whose parameters are the schema
    prompt        the schema in the prompt only; the answer is validated and repaired

The gateway tries them in this order until one is accepted, remembers the winner per endpoint
(model + api_base) for the process and in the run folder (`structured_modes.json`), and records
the mode of every request in the ledger. A role's `structured_mode` setting pins one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically

StructuredMode = Literal["json_schema", "json_object", "tool", "prompt"]
MODES: tuple[StructuredMode, ...] = get_args(StructuredMode)
MODES_FILE = "structured_modes.json"


def mode_params(mode: StructuredMode, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The request parameters that ask for `schema` in `mode` (none for `prompt`)."""
    if mode == "json_schema":
        return {
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}
        }
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if mode == "tool":
        function = {"name": name, "description": f"Report the answer as a {name} object.", "parameters": schema}
        return {
            "tools": [{"type": "function", "function": function}],
            "tool_choice": {"type": "function", "function": {"name": name}},
        }
    return {}


def answer_text(message: Any, mode: StructuredMode | None) -> str:
    """The answer's text: the forced tool call's arguments in `tool` mode, else the content."""
    if mode == "tool":
        for call in getattr(message, "tool_calls", None) or []:
            arguments = getattr(getattr(call, "function", None), "arguments", None)
            if arguments:
                return arguments if isinstance(arguments, str) else json.dumps(arguments)
    return getattr(message, "content", None) or ""


def supported_modes(model: str) -> tuple[StructuredMode, ...]:
    """The modes litellm can send to this provider (it would silently drop the others' parameters)."""
    import litellm

    try:
        _, provider, _, _ = litellm.get_llm_provider(model)
        params = litellm.get_supported_openai_params(model=model.split("/", 1)[-1], custom_llm_provider=provider)
    except Exception:  # noqa: BLE001 - a provider litellm cannot place: try every mode
        return MODES
    if params is None:
        return MODES
    keep: list[StructuredMode] = []
    for mode in MODES:
        needs = {"json_schema": "response_format", "json_object": "response_format", "tool": "tools"}.get(mode)
        if needs is None or needs in params:
            keep.append(mode)
    return tuple(keep)


class ModeMemory:
    """Which mode each endpoint accepted: shared by the whole process, and kept in a run folder
    when given one, so a resumed run asks in the same mode (and so hits the same cache entries)."""

    _process: dict[str, StructuredMode] = {}
    _process_lock = threading.Lock()
    _discovery: dict[tuple[str, int], asyncio.Lock] = {}  # process-wide too: one discovery per endpoint

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._file_lock = threading.Lock()
        self._recorded = self._load()

    @classmethod
    def in_folder(cls, folder: str | Path | None) -> ModeMemory:
        return cls(Path(folder) / MODES_FILE if folder else None)

    @classmethod
    def forget_process(cls) -> None:
        """Forget what this process learned (tests)."""
        with cls._process_lock:
            cls._process.clear()
            cls._discovery.clear()

    def known(self, endpoint: str) -> StructuredMode | None:
        recorded = self._recorded.get(endpoint, {}).get("mode")
        if recorded in MODES:
            return recorded
        with self._process_lock:
            return self._process.get(endpoint)

    def learn(self, endpoint: str, mode: StructuredMode) -> None:
        with self._process_lock:
            self._process[endpoint] = mode
        if self.path is None:
            return
        with self._file_lock:
            if self._recorded.get(endpoint, {}).get("mode") == mode:
                return
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            self._recorded = {**self._load(), endpoint: {"mode": mode, "learned_at": stamp}}
            write_atomically(self.path, json.dumps(self._recorded, indent=2, sort_keys=True) + "\n")

    def recorded(self) -> dict[str, dict[str, str]]:
        """What the run folder holds (endpoint -> mode, learned_at)."""
        return dict(self._recorded)

    def discovery_lock(self, endpoint: str) -> asyncio.Lock:
        """Held while an endpoint's mode is being found, so concurrent calls wait for the answer
        instead of each being refused in the same modes."""
        key = (endpoint, id(asyncio.get_running_loop()))
        with self._process_lock:
            if key not in self._discovery:
                self._discovery[key] = asyncio.Lock()
            return self._discovery[key]

    def _load(self) -> dict[str, dict[str, str]]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(no_follow.read_text(self.path))
        except (OSError, json.JSONDecodeError):
            return {}  # a damaged file only costs a rediscovery
        return data if isinstance(data, dict) else {}
