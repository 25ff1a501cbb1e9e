"""Commands over finished (or interrupted) run folders: `atelier report`, `compare`, `trace`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def report(run_dir: Path = typer.Argument(..., help="A run folder (runs/out/<run_id>).")) -> None:
    """Write RUN_DIR's summary.json and report.html again from its results and ledger; print the report's path."""
    from runs.runner import RunFolder, finish_run, load_run_config

    folder = RunFolder(run_dir)
    outcome = finish_run(folder, load_run_config(run_dir))
    for line in outcome.lines():
        typer.echo(line, err=True)
    typer.echo(str(folder.report))


def compare(
    run_dirs: list[Path] = typer.Argument(..., help="Two or more run folders."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the comparison as a page here."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="The run:system the others are tested against (default: the first)."),
) -> None:
    """One table across runs: systems x judges with 95% CIs; paired tests on the cases runs share."""
    from rich.console import Console

    from runs.compare import compare_runs, print_comparison, write_comparison_html

    comparison = compare_runs(run_dirs, baseline=baseline)
    print_comparison(comparison, Console())
    if html is not None:
        write_comparison_html(comparison, html)
        typer.echo(str(html), err=True)


def trace(
    run_dir: Path = typer.Argument(..., help="A run folder."),
    case_id: str = typer.Argument(..., help="The case to step through."),
    system: Optional[str] = typer.Option(None, "--system", help="Which system's episode (needed when the run has several)."),
    step: Optional[int] = typer.Option(None, "--step", help="Start at this step (1-based)."),
    interactive: Optional[bool] = typer.Option(None, "--interactive/--all", help="Step with keys (default on a terminal) or print every step."),
    full: bool = typer.Option(False, "--full", help="Show prompts, answers and state values whole (default: cut at 600 characters)."),
) -> None:
    """Step through one episode's checkpoints: node, what changed in the state, each LLM call with its
    prompt, response, tokens and latency. Keys: n/→/space next, p/← previous, g first, G last, q quit."""
    import sys

    from runs.trace import load_trace, step_through

    steps = load_trace(run_dir, case_id, system)
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    step_through(steps, start=(step or 1) - 1, interactive=interactive, width=10**9 if full else 600)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("compare")(compare)
    app.command("trace")(trace)
