"""`atelier check memory|pipeline|judge|benchmark REF`: the conformance kit (runs/studies/conformance).

REF is a registered name (`full`, `deep_research`, `pqr`, `sample`), a `module:attr` reference
(`mylab.memory:KeywordMemory`) or an installed plugin's entry-point name. Each clause of the
protocol's contract is printed held or broken, with its evidence. Exit 0: every clause held; 3:
some clause broken; 2: bad input (an unknown REF, a bad option).
"""

from __future__ import annotations

import asyncio
from enum import Enum
from pathlib import Path

import typer


class Protocol(str, Enum):
    memory = "memory"
    pipeline = "pipeline"
    judge = "judge"
    benchmark = "benchmark"


def check(
    protocol: Protocol = typer.Argument(..., help="Which contract: memory, pipeline, judge or benchmark."),
    ref: str = typer.Argument(
        ..., help="A registered name, a module:attr reference, or an installed plugin's entry-point name."
    ),
    option: list[str] = typer.Option(
        [],
        "--option",
        help="key=value: an option of the checked system (a memory backend's config, a pipeline's "
        "pipeline_options, a judge's [[judges]] table, a benchmark's options); repeatable.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the clauses as JSON."),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Keep the check's stores, caches and runs in this folder (default: a temporary one)."
    ),
) -> None:
    """Run a protocol's contract on REF with the scripted model; print each clause held or broken with its evidence."""
    from atelier.runs.cli._common import print_json
    from atelier.runs.cli.memory import declared, parse_assignments
    from atelier.runs.studies.conformance.run import options_model, run_check

    # the values are read as the checked system's config declares them (`--option key=35` for a str)
    options = parse_assignments(option, "--option", *declared(lambda: options_model(protocol.value, ref)))
    report = asyncio.run(run_check(protocol.value, ref, options, workdir))
    if as_json:
        print_json(report.as_json())
    else:
        for line in report.lines():
            typer.echo(line)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("check")(check)
