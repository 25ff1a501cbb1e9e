"""The ledger: one JSON line per model call, tagged with run, case, node and role.

A system's call of one of its own tools that is not a model call (`recall_memory`: a memory
backend asked for context) is a line too, `kind = "tool"` with the tool's name as role, no model,
no tokens, and what it was asked and gave in `tool_input` / `tool_output`. It is kept apart from
the model calls — in `Ledger.tool_entries`, not `Ledger.entries`; left out by `read_ledger` unless
asked for (`read_tool_calls`); left out by `ledger_totals` — so no call count, usage or cost tally,
bench or `atelier trace` counts it as a model call.

Tags other than the role come from context: the runner sets the case with `call_tags(case=...)`
and LangGraph supplies the node name, so graph code never threads ids through by hand.

A line is written with the run's keys redacted (`benchmarks.common.redaction`): a provider's error that
quotes the key it was sent is kept, the key is not. Entries kept in memory are as recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.collect import collecting
from atelier.benchmarks.common.json_input import read_appended_jsonl, validation_error
from atelier.benchmarks.common.redaction import active_redactor

_tags: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "atelier_call_tags", default=MappingProxyType({})
)
_captured: contextvars.ContextVar[list[LedgerEntry] | None] = contextvars.ContextVar(
    "atelier_ledger_capture", default=None
)


@contextlib.contextmanager
def call_tags(**tags: str | None) -> Iterator[None]:
    """Tag every model call made inside this block (`case=`, `system=`, `epoch=`, `control=`, `node=`)."""
    merged = {**_tags.get(), **{k: v for k, v in tags.items() if v is not None}}
    token = _tags.set(merged)
    try:
        yield
    finally:
        _tags.reset(token)


@contextlib.contextmanager
def capture_calls() -> Iterator[list[LedgerEntry]]:
    """Collect every entry any ledger records inside this block (tasks it starts included): a
    remote worker ships one episode's calls back to the driver this way, whose ledger alone writes
    the run folder's file (`Ledger.append`)."""
    with collecting(_captured) as entries:
        yield entries


def current_tags() -> dict[str, str]:
    tags = dict(_tags.get())
    if "node" not in tags:
        node = _langgraph_node()
        if node:
            tags["node"] = node
    return tags


def _langgraph_node() -> str | None:
    try:
        from langgraph.config import get_config

        return get_config().get("metadata", {}).get("langgraph_node")
    except RuntimeError:  # not inside a graph run
        return None


class LedgerEntry(BaseModel):
    ts: float
    run_id: str
    case_id: str | None = None
    system: str | None = None
    epoch: int = 1  # which run of (case, system) the call belongs to (`[run] epochs`)
    control: str | None = None  # the counterfactual control episode it belongs to (`[run] controls`), if any
    node: str | None = None
    role: str
    model: str
    call_id: str
    request_key: str | None = None  # the response cache's key: where `atelier trace` finds prompt and answer
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    cache_hit: bool = False
    attempts: int = 0
    kind: str = "text"  # text | structured | repair | grounded | tool (a system's tool call, not a model call)
    structured_mode: str | None = None  # json_schema | json_object | tool | prompt (structured requests)
    status: str = "ok"  # ok | error | refused (the endpoint would not take this structured mode)
    error: str | None = None
    # a grounded call (a model that researches, `Gateway.grounded`): what its provider reported
    # beyond prompt and completion tokens; None: not such a call, or the provider did not say
    reasoning_tokens: int | None = None
    citation_tokens: int | None = None
    search_calls: int | None = None  # web searches the provider ran for the answer
    provider_ms: float | None = None  # the provider's share of latency_ms (litellm's timing, last attempt)
    finish_reason: str | None = None  # "length": the answer was cut at max_tokens or the context's end
    dry_run: bool = False
    tool_input: dict[str, Any] | None = None  # kind "tool": what the tool was asked (a recall's query)
    tool_output: dict[str, Any] | None = None  # kind "tool": what it gave (a recall's event ids)
    caller: str | None = None  # kind "tool": the graph node that called the tool (`answer`, ...)

    @property
    def is_model_call(self) -> bool:
        return self.kind != TOOL_KIND


TOOL_KIND = "tool"


def model_calls(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """The entries that are model calls (a system's tool calls left out)."""
    return [e for e in entries if e.is_model_call]


def tool_calls(entries: list[LedgerEntry], node: str | None = None) -> list[LedgerEntry]:
    """The entries that are a system's tool calls (of the tool `node`, when given), each call once:
    a resumed episode that runs a step again writes its tool calls again under the same call id
    (graphs/memory_tool.py), and only the first line of an id counts."""
    seen: set[tuple[str, str | None, int, str | None, str]] = set()
    out = []
    for e in entries:
        if e.is_model_call or (node is not None and e.node != node):
            continue
        key = (e.call_id, e.system, e.epoch, e.control, e.run_id)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


class Ledger:
    """Appends entries to a JSONL file (or keeps them in memory when no path is given)."""

    def __init__(self, path: str | Path | None, run_id: str = "") -> None:
        self.path = Path(path) if path else None
        self.run_id = run_id
        self.entries: list[LedgerEntry] = []  # model calls
        self.tool_entries: list[LedgerEntry] = []  # a system's tool calls (`record_tool`)
        self._lock = threading.Lock()
        # what the calls so far spent (a run's progress shows it): tokens sent to and answered by
        # providers, their dollars, the provider calls with no price, and the calls the cache answered
        self.running = {"calls": 0, "cache_hits": 0, "tokens": 0, "cost_usd": 0.0, "unpriced_calls": 0}
        # the file, opened (never through a link) at the first append and kept open: opening it
        # from the run folder down on every call was half of what recording a call cost
        self._fd: int | None = None
        if self.path:
            no_follow.make_folders(self.path.parent)

    def record(self, **fields: Any) -> LedgerEntry:
        tags = current_tags()
        entry = LedgerEntry(
            ts=time.time(),
            run_id=self.run_id,
            case_id=fields.pop("case_id", None) or tags.get("case"),
            system=fields.pop("system", None) or tags.get("system"),
            epoch=int(fields.pop("epoch", None) or tags.get("epoch") or 1),
            control=fields.pop("control", None) or tags.get("control"),
            node=fields.pop("node", None) or tags.get("node"),
            **fields,
        )
        self.append([entry])
        captured = _captured.get()
        if captured is not None:
            captured.append(entry)
        return entry

    def record_tool(
        self, tool: str, call_id: str, tool_input: dict[str, Any], tool_output: dict[str, Any], latency_ms: float = 0.0
    ) -> LedgerEntry:
        """A system's call of its tool `tool` that is not a model call: under node `tool`, no model,
        no tokens, never counted as a model call (`model_calls`, `ledger_totals`)."""
        return self.record(
            node=tool,
            caller=current_tags().get("node"),
            role=tool,
            model="",
            call_id=call_id,
            kind=TOOL_KIND,
            latency_ms=latency_ms,
            tool_input=tool_input,
            tool_output=tool_output,
        )

    def append(self, entries: list[LedgerEntry]) -> None:
        """Add entries recorded elsewhere (a remote worker's calls) as they are."""
        text = ""
        if self.path:
            redactor = active_redactor()
            text = "".join(redactor.redact(entry.model_dump_json()) + "\n" for entry in entries)
        with self._lock:
            for e in entries:
                if e.is_model_call:
                    self._count(e)
            self.entries.extend(e for e in entries if e.is_model_call)
            self.tool_entries.extend(e for e in entries if not e.is_model_call)
            if self.path and text:
                self._write(text.encode("utf-8"))

    def _write(self, data: bytes) -> None:
        """Append `data` in one write (whole lines: a reader never sees two writers' lines interleaved)."""
        if self._fd is None:
            assert self.path is not None
            self._fd = no_follow.open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            weakref.finalize(self, os.close, self._fd)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _count(self, e: LedgerEntry) -> None:
        self.running["calls"] += 1
        if e.cache_hit:
            self.running["cache_hits"] += 1
        elif e.status == "ok":
            self.running["tokens"] += e.prompt_tokens + e.completion_tokens
            if e.cost_usd is None:
                self.running["unpriced_calls"] += 1
            else:
                self.running["cost_usd"] += e.cost_usd

    def running_totals(self) -> dict[str, Any]:
        """The calls so far, as spent (cheap: kept as they are appended)."""
        with self._lock:
            return dict(self.running)

    def totals(self) -> dict[str, Any]:
        with self._lock:
            return ledger_totals(list(self.entries))


def ledger_totals(entries: list[LedgerEntry]) -> dict[str, Any]:
    """Calls, provider calls (not served from the cache), hits, errors, refused output modes (the
    gateway then asked in a weaker one), tokens and cost.

    A provider call of a model litellm has no price for has an unknown cost, never $0:
    `unpriced_calls` counts them, and `cost_usd` is None when no provider call was priced (a
    partial sum when some were). A system's tool calls (`kind = "tool"`) are not model calls and
    are left out."""
    entries = model_calls(entries)
    provider = [e for e in entries if not e.cache_hit and e.status == "ok"]
    priced = [e.cost_usd for e in provider if e.cost_usd is not None]
    return {
        "calls": len(entries),
        "provider_calls": len(provider),
        "cache_hits": sum(e.cache_hit for e in entries),
        "errors": sum(e.status == "error" for e in entries),
        "mode_refusals": sum(e.status == "refused" for e in entries),
        "prompt_tokens": sum(e.prompt_tokens for e in provider),
        "completion_tokens": sum(e.completion_tokens for e in provider),
        "reasoning_tokens": sum(e.reasoning_tokens or 0 for e in provider),
        "search_calls": sum(e.search_calls or 0 for e in provider),
        "cost_usd": round(sum(priced), 6) if priced or not provider else None,
        "unpriced_calls": len(provider) - len(priced),
    }


def read_ledger(path: str | Path, *, repair: bool = False, tools: bool = False) -> list[LedgerEntry]:
    """The model calls of a ledger file (with `tools`, a system's tool calls too, in file order). A
    torn last line (the process died while writing it) is left out — with `repair` also cut from
    the file, so appending can go on; any other bad line is a DataError naming it."""
    entries = []
    for number, data in read_appended_jsonl(path, repair=repair).values:
        try:
            entries.append(LedgerEntry.model_validate(data))
        except ValidationError as exc:
            raise validation_error(exc, file=path, line=number) from None
    return entries if tools else model_calls(entries)


def read_tool_calls(path: str | Path, node: str | None = None) -> list[LedgerEntry]:
    """A ledger file's tool calls (of the tool `node`, when given): `recall_memory` lines, ..."""
    return tool_calls(read_ledger(path, tools=True), node)
