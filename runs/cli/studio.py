"""`atelier studio [DIR]`: a langgraph.json that serves Atelier's graphs and your plugin pipelines to
LangGraph Studio from any install (a wheel too), and optionally the server itself."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import typer

OFFLINE_NOTE = (
    "LangGraph's Studio UI (the smith.langchain.com address langgraph dev prints) is a hosted page: it needs "
    "the internet. Offline, the server's API works as is (its /docs page loads a script from a CDN and does not): "
    "drive it with langgraph-sdk or curl (docs/studio.md), and read runs with `atelier view` / `atelier trace`."
)


def _graphs(values: list[str]) -> dict[str, str]:
    from atelier.benchmarks.common.errors import ConfigError

    out = {}
    for value in values:
        name, sep, target = value.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ConfigError(
                f"--graph {value!r}: give NAME=module:attr (a pipeline's graph factory) or NAME=entry-point"
            )
        out[name.strip()] = target.strip()
    return out


def studio(
    folder: Path = typer.Argument(Path("studio"), help="Where to write langgraph.json and atelier_graphs.py."),
    graph: list[str] = typer.Option(
        [],
        "--graph",
        help="Serve a pipeline of your own too, as NAME=module:attr (its graph factory) or NAME=entry-point-name; "
        "repeatable. Installed plugin pipelines are served without it.",
    ),
    serve: bool = typer.Option(False, "--serve", help="Start `langgraph dev` on the written config."),
    port: int = typer.Option(2025, "--port", min=1, max=65535, help="The server's port (with --serve)."),
) -> None:
    """Write a langgraph.json serving Atelier's graphs (episode, each pipeline, memory, judge, simulate)
    and every plugin pipeline, naming no file of a checkout; with --serve, start the server on it."""
    from atelier.graphs.studio_config import write_studio_config

    config = write_studio_config(folder, _graphs(graph))
    typer.echo(str(config))
    command = ["langgraph", "dev", "--config", str(config), "--port", str(port), "--no-browser"]
    typer.echo(OFFLINE_NOTE, err=True)
    if not serve:
        typer.echo(f"start it with: {' '.join(command)}", err=True)
        return
    langgraph = shutil.which("langgraph") or str(Path(sys.executable).parent / "langgraph")
    os.execv(langgraph, [langgraph, *command[1:]])


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("studio")(studio)
