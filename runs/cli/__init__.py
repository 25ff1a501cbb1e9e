"""The `atelier` command. Each area registers its commands from its own module in this package.

Command modules import heavy libraries (litellm, torch, chromadb) inside the command functions,
so `atelier --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

from benchmarks.errors import AtelierError

app = typer.Typer(
    name="atelier",
    help="Atelier: run personalized information-seeking agents against benchmarks, judges and simulated users.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Speed and memory benchmarks; each prints JSON.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# Each module defines `register(app, bench_app)`.
_COMMAND_MODULES = (
    "runs.cli.run",
    "runs.cli.recipe",
    "runs.cli.data",
    "runs.cli.metric",
    "runs.cli.memory",
    "runs.cli.web",
    "runs.cli.judges",
    "runs.cli.gateway",
    "runs.cli.bench_pipelines",
)
for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:
        if exc.name != _name:
            raise
        continue
    _module.register(app, bench_app)


def main() -> None:
    import runs  # noqa: F401  (applies the offline defaults)

    try:
        app()
    except AtelierError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
