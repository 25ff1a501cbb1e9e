"""`atelier run RECIPE`: run a recipe's grid and write a run folder."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer


class ExecutorName(str, Enum):
    local = "local"
    ray = "ray"


def run(
    recipe: Path = typer.Argument(..., help="A recipe TOML file, e.g. runs/recipes/quickstart.toml."),
    model: Optional[str] = typer.Option(None, "--model", help="Use this model for every role (any litellm provider string, or `scripted`)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for every role."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY", help="API key for every role."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Run at most N cases."),
    out: Optional[Path] = typer.Option(None, "--out", help="The run folder (an existing one is resumed)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    executor: Optional[ExecutorName] = typer.Option(None, "--executor", help="Where episodes run: local (this "
                                                    "process) or ray (a cluster); default: the recipe's [run] executor."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="The Ray cluster (host:port of its head, "
                                              "or 'auto'); implies --executor ray."),
) -> None:
    """Run every (case x system) episode of RECIPE; print the run folder's path last."""
    from benchmarks.errors import ConfigError
    from runs.recipe import load_recipe
    from runs.runner import run_recipe

    if ray_address and executor is ExecutorName.local:
        raise ConfigError("--ray-address names a Ray cluster, but --executor is local")
    chosen = executor.value if executor else ("ray" if ray_address else None)
    loaded = load_recipe(recipe).with_overrides(model=model, api_base=api_base, api_key=api_key, limit=limit,
                                                executor=chosen,
                                                ray_address=ray_address)
    folder = run_recipe(loaded, out, progress=progress)
    _print_summary(folder.summary)
    typer.echo(str(folder.path))


def _print_summary(path: Path) -> None:
    import json

    from rich.console import Console
    from rich.table import Table

    summary = json.loads(path.read_text(encoding="utf-8"))
    table = Table(title="DRY RUN (scripted model)" if summary["dry_run"] else None)
    for column in ("system", "judge", "n", "mean", "95% CI", "failed"):
        table.add_column(column)
    for system, entry in summary["systems"].items():
        for judge, stats in entry["judges"].items():
            low, high = stats["ci95"]
            table.add_row(
                system, judge, str(stats["n"]),
                f"{stats['mean']:.3f}" if stats["mean"] is not None else "–",
                f"[{low:.3f}, {high:.3f}]" if low is not None else "–",
                str(entry["errors"] + stats["failed"]),
            )
    ledger = summary["ledger"]
    console = Console(stderr=True)
    console.print(table)
    console.print(
        f"model calls: {ledger['calls']} ({ledger['provider_calls']} to providers, {ledger['cache_hits']} cache hits), "
        f"tokens {ledger['prompt_tokens']}+{ledger['completion_tokens']}, cost ${ledger['cost_usd']}"
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run)
