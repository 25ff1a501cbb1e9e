"""`atelier trace RUN_DIR CASE_ID [--system S]`: step through one episode's checkpoints.

Each step is one checkpoint of the episode graph or of one of its subgraphs (memory, the system's
pipeline, the judges), in the order they were written: where it happened, the node(s) that ran to
produce it, what changed in that graph's state, and each model call those nodes made — prompt and
answer from the response cache, tokens, latency and status from the ledger.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atelier.agents.models.ledger import LedgerEntry, read_ledger
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.folder.epochs import run_epochs
from atelier.runs.folder.results import result_key

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

_INTERNAL = ("branch:", "__start__", "__pregel_", "__interrupt__", "__resume__")


@dataclass
class Call:
    entry: LedgerEntry
    messages: list[dict[str, Any]] | None = None
    answer: str | None = None


@dataclass
class Step:
    index: int
    where: str  # episode, episode › memory, ...
    source: str  # input | loop | update | fork
    nodes: list[str]
    ts: str
    changed: dict[str, Any]
    calls: list[Call] = field(default_factory=list)


def _where(namespace: str) -> str:
    parts = [part.split(":")[0] for part in namespace.split("|") if part]
    return " › ".join(["episode", *parts])


def _visible(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if not k.startswith(_INTERNAL)}


def _next_nodes(values: dict[str, Any]) -> list[str]:
    """The nodes a checkpoint triggers: its `branch:to:<node>` channels and any `Send` packets."""
    nodes = ["__start__"] if "__start__" in values else []  # the input is written into the state
    nodes += [k.removeprefix("branch:to:") for k in values if k.startswith("branch:to:")]
    for packet in values.get("__pregel_tasks") or []:
        node = getattr(packet, "node", None)
        if node and node not in nodes:
            nodes.append(node)
    return nodes


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _checkpoints(path: Path, thread_id: str) -> list[tuple[str, Any]]:
    """Every checkpoint of one episode, by namespace. A database that cannot be read (a folder, a
    truncated or foreign file, a damaged value) is a DataError naming it."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from atelier.graphs.persistence import RunSerializer, connect_checkpoints, unreadable

    with contextlib.closing(connect_checkpoints(path)) as conn:
        try:
            namespaces = [
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = ?", (thread_id,)
                )
            ]
            saver = SqliteSaver(conn, serde=RunSerializer(conn))
            out = []
            for namespace in namespaces:
                config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}}
                out += [(namespace, item) for item in saver.list(config)]
        except (sqlite3.DatabaseError, zlib.error) as exc:  # OperationalError too: no `checkpoints` table
            raise unreadable(path, exc) from None
    return out


def _calls_from_cache(entries: list[LedgerEntry], cache_dir: str | None) -> list[Call]:
    calls = [Call(entry) for entry in entries]
    if not cache_dir or not Path(cache_dir).exists():
        return calls
    from atelier.agents.models.cache import ResponseCache

    cache = ResponseCache(cache_dir)
    try:
        for call in calls:
            cached = cache.get(call.entry.request_key) if call.entry.request_key else None
            if cached is not None:
                call.messages, call.answer = cached.get("messages"), cached.get("content")
    finally:
        cache.close()
    return calls


def load_trace(
    run_dir: str | Path,
    case_id: str,
    system: str | None = None,
    epoch: int = 1,
    control: str | None = None,
    *,
    ledger: list[LedgerEntry] | None = None,
) -> list[Step]:
    """The steps of one episode: the system's own, or (`control`) one of its counterfactual controls'.
    `ledger`: the run's model calls when the caller read them already (`atelier view`, for every episode)."""
    from atelier.runs.folder.controls import system_controls
    from atelier.runs.folder.layout import RunFolder, load_run_config

    config = load_run_config(Path(run_dir))
    folder = RunFolder(Path(run_dir))
    systems = [s["name"] for s in config["recipe"]["systems"]]
    if system is None:
        if len(systems) > 1:
            raise ConfigError(f"this run has {len(systems)} systems; name one with --system: {', '.join(systems)}")
        system = systems[0]
    if system not in systems:
        raise ConfigError(f"--system {system!r}: not in this run; valid: {', '.join(systems)}")
    if case_id not in config["cases"]:
        some = ", ".join(config["cases"][:8])
        raise ConfigError(f"no case {case_id!r} in this run ({len(config['cases'])} cases, e.g. {some})")
    epochs = run_epochs(config)
    if not 1 <= epoch <= epochs:
        raise ConfigError(f"--epoch {epoch}: this run has {'one epoch' if epochs == 1 else f'epochs 1 to {epochs}'}")
    if control is not None and control not in (kinds := system_controls(config["recipe"]).get(system, [])):
        ran = f"its controls are {', '.join(kinds)}" if kinds else "it ran no controls"
        raise ConfigError(f"--control {control!r}: system {system!r} ran no such control in this run ({ran})")
    if not folder.checkpoints.exists():
        raise ConfigError(f"{run_dir} has no checkpoints.sqlite")
    items = _checkpoints(folder.checkpoints, result_key(case_id, system, epoch, control))
    if not items:
        of_epoch = f" in epoch {epoch}" if epochs > 1 else ""
        of_control = f" (its {control} control)" if control is not None else ""
        raise ConfigError(
            f"no checkpoints for case {case_id!r} of system {system!r}{of_control}{of_epoch}: the episode never started"
        )
    items.sort(key=lambda pair: (pair[1].checkpoint["ts"], pair[1].checkpoint["id"]))
    if ledger is None:
        ledger = read_ledger(folder.ledger) if folder.ledger.exists() else []
    ledger = [
        e
        for e in ledger
        if e.case_id == case_id and e.system == system and e.epoch == epoch and e.control == control  # its own only
    ]

    steps: list[Step] = []
    previous: dict[str, Any] = {}  # per namespace: the last checkpoint seen
    for namespace, item in items:
        values = item.checkpoint.get("channel_values", {})
        parent = previous.get(namespace)
        source = (item.metadata or {}).get("source", "loop")
        before = _visible(parent.checkpoint.get("channel_values", {})) if parent else {}
        visible = _visible(values)
        changed = {k: v for k, v in visible.items() if k not in before or before[k] != v}
        nodes = _next_nodes(parent.checkpoint.get("channel_values", {})) if parent else []
        if source == "input":
            nodes, changed = (
                ["(input)"],
                _visible(values.get("__start__") or {}) if isinstance(values.get("__start__"), dict) else changed,
            )
        start = _epoch(parent.checkpoint["ts"]) if parent else None
        end = _epoch(item.checkpoint["ts"])
        mine = [e for e in ledger if e.node in nodes and (start is None or start <= e.ts) and e.ts <= end + 0.001]
        steps.append(
            Step(
                len(steps) + 1,
                _where(namespace),
                source,
                nodes,
                item.checkpoint["ts"],
                changed,
                _calls_from_cache(mine, config.get("cache_dir")),
            )
        )
        previous[namespace] = item
    return steps


# ----------------------------------------------------------------------------- rendering


def _plain(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def render_step(step: Step, total: int, console, width: int = 600) -> None:
    from rich.panel import Panel
    from rich.pretty import Pretty
    from rich.rule import Rule
    from rich.text import Text

    nodes = ", ".join(step.nodes) or "–"
    console.print(Rule(f"step {step.index}/{total} · {step.where} · {nodes} · {step.source} · {step.ts}"))
    if step.changed:
        for key, value in step.changed.items():
            console.print(Text(f"{key}:", style="bold"), Pretty(_plain(value), max_string=width, max_length=12))
    else:
        console.print(Text("(no state change)", style="dim"))
    for call in step.calls:
        e = call.entry
        head = (
            f"{e.role} · {e.model} · {e.kind} · {e.prompt_tokens}+{e.completion_tokens} tokens · "
            f"{e.latency_ms:.0f} ms · {'cache hit' if e.cache_hit else 'provider'} · {e.status}"
        )
        body = Text()
        if call.messages:
            for message in call.messages:
                content = str(message.get("content", ""))
                body.append(f"{message.get('role')}: ", style="bold")
                body.append((content[:width] + " …") if len(content) > width else content)
                body.append("\n")
        else:
            body.append("(prompt not in the response cache)\n", style="dim")
        body.append("answer: ", style="bold green")
        answer = call.answer if call.answer is not None else (e.error or "(not in the response cache)")
        body.append((answer[:width] + " …") if len(answer) > width else answer)
        console.print(Panel(body, title=head, title_align="left", border_style="red" if e.status != "ok" else "blue"))


KEYS = "n/→/space next · p/← previous · g first · G last · q quit"


def step_through(
    steps: list[Step], *, start: int = 0, interactive: bool = True, console=None, width: int = 600
) -> None:
    import typer
    from rich.console import Console

    console = console or Console()
    total = len(steps)
    position = min(max(start, 0), total - 1)
    if not interactive:
        for step in steps[position:]:
            render_step(step, total, console, width)
        return
    while True:
        render_step(steps[position], total, console, width)
        console.print(f"[dim]{KEYS}[/dim]")
        key = typer.getchar()
        if key in ("q", "Q", "\x1b"):
            return
        if key in ("n", " ", "\r", "\n", "\x1b[C", "j"):
            position = min(position + 1, total - 1)
        elif key in ("p", "\x1b[D", "k"):
            position = max(position - 1, 0)
        elif key == "g":
            position = 0
        elif key == "G":
            position = total - 1
