"""Commands over finished (or interrupted) run folders: `atelier report`, `compare`, `trace`."""

from __future__ import annotations

from pathlib import Path

import typer

from atelier.runs.cli._common import table_console
from atelier.runs.cli.run import ExecutorName


def report(run_dir: Path = typer.Argument(..., help="A run folder (runs/out/<run_id>).")) -> None:
    """Write RUN_DIR's summary.json and report.html again from its results and ledger; print the report's path."""
    from atelier.runs.cli._common import end_with_outcome
    from atelier.runs.folder.layout import RunFolder, load_run_config
    from atelier.runs.folder.lock import RunFolderLock
    from atelier.runs.reading.finish import finish_run, stored_budget

    folder = RunFolder(run_dir)
    config = load_run_config(run_dir)
    with RunFolderLock(folder.path, "report"):  # not while a run still writes the folder
        outcome = finish_run(folder, config, budget=stored_budget(folder))
    code = end_with_outcome(outcome)
    typer.echo(str(folder.report))
    raise typer.Exit(code)


def compare(
    run_dirs: list[Path] = typer.Argument(..., help="Two or more run folders."),
    html: Path | None = typer.Option(
        None,
        "--html",
        help="Also write the comparison as a page here: the tables, the configs side by side with their "
        "differences marked, every case's responses and scores side by side, and the plots.",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="The run:system the others are tested against (default: the first)."
    ),
) -> None:
    """One table across runs: systems x judges with 95% CIs; paired tests on the cases runs share.
    Ends with each run's outcome line; exits as `run` would on the worst of them (0, 3, 130)."""
    from atelier.runs.cli._common import end_with_outcome, run_outcome, worst_exit
    from atelier.runs.reading.compare import compare_runs, print_comparison, write_comparison_html

    comparison = compare_runs(run_dirs, baseline=baseline)
    print_comparison(comparison, table_console())
    if html is not None:
        write_comparison_html(comparison, html)
        typer.echo(str(html), err=True)
    codes = [end_with_outcome(run_outcome(Path(r["dir"])), label=r["label"]) for r in comparison["runs"]]
    raise typer.Exit(worst_exit(codes))


def trace(
    run_dir: Path = typer.Argument(..., help="A run folder."),
    case_id: str = typer.Argument(..., help="The case to step through."),
    system: str | None = typer.Option(
        None, "--system", help="Which system's episode (needed when the run has several)."
    ),
    epoch: int = typer.Option(1, "--epoch", min=1, help="Which epoch's episode (runs with [run] epochs > 1)."),
    control: str | None = typer.Option(
        None, "--control", help="One of the system's counterfactual control episodes ([run] controls), not its own."
    ),
    step: int | None = typer.Option(None, "--step", help="Start at this step (1-based)."),
    interactive: bool | None = typer.Option(
        None, "--interactive/--all", help="Step with keys (default on a terminal) or print every step."
    ),
    full: bool = typer.Option(
        False, "--full", help="Show prompts, answers and state values whole (default: cut at 600 characters)."
    ),
) -> None:
    """Step through one episode's checkpoints: node, what changed in the state, each LLM call with its
    prompt, response, tokens and latency. Keys: n/→/space next, p/← previous, g first, G last, q quit."""
    import sys

    from atelier.runs.cli._common import end_with_outcome, run_outcome
    from atelier.runs.reading.trace import load_trace, step_through

    steps = load_trace(run_dir, case_id, system, epoch, control)
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    step_through(steps, start=(step or 1) - 1, interactive=interactive, width=10**9 if full else 600)
    raise typer.Exit(end_with_outcome(run_outcome(run_dir)))


def bench_runner(
    cases: int = typer.Option(250, "--cases", min=1, help="Episodes (sample-suite cases, repeated under new ids)."),
    latency_ms: float = typer.Option(
        100.0, "--latency-ms", min=0, help="Latency of every model call (the scripted model's, or the provider's)."
    ),
    concurrency: int = typer.Option(32, "--concurrency", min=1, max=256, help="Episodes in flight."),
    pipeline: str = typer.Option("direct", "--pipeline", help="The system's pipeline."),
    memory: str = typer.Option("none", "--memory", help="The system's memory backend."),
    judge: list[str] = typer.Option(
        [], "--judge", help="A judge to run in each episode (repeatable; none by default)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Keep the run folder here (default: a temporary one)."),
    executor: ExecutorName = typer.Option(ExecutorName.local, "--executor", help="Where episodes run: local or ray."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="ray: the cluster's head (host:port)."),
    rpm: int | None = typer.Option(
        None,
        "--rpm",
        min=1,
        help="Ask a loopback provider that admits at most RPM requests per minute (429 with Retry-After past "
        "it), with the run's own rpm set to RPM; reports limit_efficiency and rate_limited_share.",
    ),
) -> None:
    """Runner efficiency against the ideal wall time, framework ms per LLM call, peak RSS and checkpoint
    bytes per episode (JSON); with --rpm, how well the run keeps a provider's rate limit busy."""
    from atelier.runs.bench.runner import RunnerBenchSettings, run_runner_benchmark
    from atelier.runs.cli._common import machine_facts, print_json

    settings = RunnerBenchSettings(
        cases=cases,
        latency_ms=latency_ms,
        concurrency=concurrency,
        pipeline=pipeline,
        memory=memory,
        judges=judge,
        out_dir=out,
        executor="ray" if ray_address else executor.value,
        ray_address=ray_address,
        rpm=rpm,
    )
    print_json({**run_runner_benchmark(settings), "machine": machine_facts()})


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("runner")(bench_runner)
    app.command("report")(report)
    app.command("compare")(compare)
    app.command("trace")(trace)
