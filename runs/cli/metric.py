"""`atelier metric NAME --input FILE.json`: compute one pure metric from a JSON input and print JSON.

`atelier metric --list` (or `atelier metric list`) names the metrics; `--schema` prints a metric's
documented input schema. Example inputs live in benchmarks/metrics/examples/NAME.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli._common import print_json

_LIST_WORD = "list"


def metric(
    name: Annotated[str | None, typer.Argument(help="Metric name; `list` lists them.", show_default=False)] = None,
    input_path: Annotated[
        Path | None, typer.Option("--input", "-i", help="JSON file with the metric's input.", show_default=False)
    ] = None,
    list_metrics: Annotated[bool, typer.Option("--list", help="List the metrics and exit.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Print the metric's input JSON schema and exit.")] = False,
) -> None:
    """Compute a metric (PQR, BESPOKE, LaMP-QA, AEPD, LoCoMo, PrefEval, ranking, agreement, statistics); print JSON."""
    from atelier.benchmarks.metrics.registry import METRICS, get_metric, read_metric_input, run_metric

    if list_metrics or name == _LIST_WORD:
        print_json(
            [
                {"name": spec.name, "description": spec.description, "example": str(spec.example_path)}
                for spec in METRICS.values()
            ]
        )
        return
    if name is None:
        raise ConfigError("name a metric (see `atelier metric --list`)")
    spec = get_metric(name)
    if schema:
        print_json(spec.input_model.model_json_schema())
        return
    if input_path is None:
        raise ConfigError(f"metric {name!r} needs --input FILE.json (example: {spec.example_path})")
    result = run_metric(name, read_metric_input(input_path), source=input_path)
    print_json(result.model_dump(mode="json"))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("metric")(metric)
