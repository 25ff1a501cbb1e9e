"""`atelier list [pipelines|memory|judges|benchmarks]`: what a recipe can name, with each entry's
typed options (field, type, default, description), as tables or `--json`."""

from __future__ import annotations

import inspect
import re
import sys
from enum import Enum
from typing import Any

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from atelier.runs.cli._common import print_json


class Kind(str, Enum):
    pipelines = "pipelines"
    memory = "memory"
    judges = "judges"
    benchmarks = "benchmarks"


_SKIP = {"name", "backend"}  # the discriminator fields: the entry's own name


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def options_of(model: type[BaseModel] | None) -> list[dict[str, Any]]:
    """A pydantic model's fields as rows: name, type, default, description."""
    if model is None:
        return []
    rows = []
    for name, info in model.model_fields.items():
        if name in _SKIP:
            continue
        if info.default is not PydanticUndefined:
            default = info.default.model_dump(mode="json") if isinstance(info.default, BaseModel) else info.default
        elif info.default_factory is not None:
            made = info.get_default(call_default_factory=True, validated_data={})
            default = made.model_dump(mode="json") if isinstance(made, BaseModel) else made
        else:
            default = "(required)"
        rows.append(
            {
                "name": name,
                "type": _type_name(info.annotation),
                "default": default,
                "description": info.description or "",
            }
        )
    return rows


def _summary(cls: type) -> str:
    """The first paragraph of the class's own docstring, else of its module's."""
    doc = cls.__dict__.get("__doc__") or getattr(sys.modules.get(cls.__module__), "__doc__", None) or ""
    first = inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ")
    return re.sub(r"^`[\w.-]+`:\s*", "", first)


def _origin(registry: Any, name: str) -> dict[str, Any]:
    """`{"plugin": "..."}` for a plugin (where it came from), nothing for a built-in."""
    origin = registry.origin(name)
    return {"plugin": origin.describe()} if origin is not None else {}


def catalog(kinds: list[Kind]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    if Kind.pipelines in kinds:
        from atelier.graphs.pipelines import PIPELINES

        out["pipelines"] = [
            {
                "name": name,
                "description": spec.description,
                "options": options_of(getattr(spec, "options", None)),
                **_origin(PIPELINES, name),
            }
            for name, spec in PIPELINES.items()
        ]
    if Kind.memory in kinds:
        from atelier.memory.registry import BACKENDS

        out["memory"] = [
            {
                "name": name,
                "description": _summary(cls),
                "options": options_of(cls.config_model),
                **_origin(BACKENDS, name),
            }
            for name, cls in BACKENDS.items()
        ]
    if Kind.judges in kinds:
        from atelier.agents.judges.base import JUDGES

        out["judges"] = [
            {
                "name": name,
                "description": _summary(cls),
                "options": options_of(cls.config_model),
                **_origin(JUDGES, name),
            }
            for name, cls in JUDGES.items()
        ]
    if Kind.benchmarks in kinds:
        from atelier.benchmarks.registry import BENCHMARKS

        out["benchmarks"] = [
            {
                **_origin(BENCHMARKS, name),
                "name": name,
                "description": spec.description,
                "splits": list(spec.splits),
                "default_split": spec.split_default,
                "settings": list(spec.settings),
                "default_setting": spec.setting_default,
                "options": options_of(spec.options),
            }
            for name, spec in BENCHMARKS.items()
        ]
    return out


def _print(listing: dict[str, list[dict[str, Any]]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from atelier.runs.reading.terminal_text import cells, visible

    console = Console()
    for kind, entries in listing.items():
        table = Table(title=kind, show_lines=True, title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("what")
        if kind == "benchmarks":
            table.add_column("splits (default first)")
            table.add_column("settings")
        table.add_column("options: name type = default")
        for entry in entries:
            options = "\n".join(f"{o['name']} {o['type']} = {o['default']!r}" for o in entry["options"]) or "–"
            what = entry["description"] + (f"\n[{entry['plugin']}]" if entry.get("plugin") else "")
            row = [entry["name"], what]
            if kind == "benchmarks":
                splits = [entry["default_split"]] + [s for s in entry["splits"] if s != entry["default_split"]]
                settings = [entry["default_setting"]] + [s for s in entry["settings"] if s != entry["default_setting"]]
                row += [", ".join(splits), ", ".join(settings)]
            table.add_row(*cells(*row, options))
        console.print(table)
    for line in broken_plugins():
        console.print(f"[red]plugin not loaded[/red]: {escape(visible(line))}")  # its name and reason as text


def broken_plugins() -> list[str]:
    """Installed entry points of the group `atelier.plugins` that failed to load, with the reason."""
    from atelier.agents.judges.base import JUDGES
    from atelier.benchmarks.registry import BENCHMARKS
    from atelier.graphs.pipelines import PIPELINES
    from atelier.memory.registry import BACKENDS

    found: dict[str, str] = {}
    for registry in (PIPELINES, BACKENDS, JUDGES, BENCHMARKS):
        found.update(registry.broken)
    return [found[name] for name in sorted(found)]


def list_command(
    kind: Kind | None = typer.Argument(None, help="Only this kind (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with each option's description)."),
) -> None:
    """Pipelines, memory backends, judges and benchmarks (with splits and settings), each with its typed options."""
    listing = catalog([kind] if kind else list(Kind))
    if as_json:
        print_json(listing)
    else:
        _print(listing)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("list")(list_command)
