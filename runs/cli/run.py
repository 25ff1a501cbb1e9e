"""`atelier run RECIPE`: run a recipe's grid and write a run folder.

Exit codes (see `runs.outcome`): 0 all episodes scored, 3 some failed or the budget was reached, 2 bad input or a failed
preflight (nothing started), 130 interrupted by Ctrl-C and 143 stopped by SIGTERM (either way what
finished is kept and the printed command resumes), 1 a bug.
"""

from __future__ import annotations

import shlex
import sys
from enum import Enum
from pathlib import Path

import typer


class ExecutorName(str, Enum):
    local = "local"
    ray = "ray"


# 128 + SIGTERM, the code shells and supervisors give a process SIGTERM ended, so a script can tell a
# stop it asked for (143) from a person's Ctrl-C (130); the run ends the same way for both
EXIT_TERMINATED = 143


class Terminated(Exception):
    """The run received SIGTERM (a `kill`, a supervisor or a scheduler stopping it)."""


async def _stopped_by_sigterm(work):
    """Await `work`; SIGTERM cancels it as Ctrl-C does (the runner's own cleanup runs: episodes in
    flight stop, finished ones stay recorded, the folder is let go), then raises `Terminated`."""
    import asyncio
    import signal

    loop, task, received = asyncio.get_running_loop(), asyncio.current_task(), []
    assert task is not None  # a coroutine's: asyncio.run runs it as a task

    def stop() -> None:
        received.append(signal.SIGTERM)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, stop)
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signals (Windows): SIGTERM stays
        return await work  # the OS's to handle, as before — a run started there is not one a `kill` reaches
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def run(
    recipe: Path = typer.Argument(
        ..., help="A recipe TOML file, or a shipped recipe by name (`quickstart`; `atelier recipe list`)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Use this model for every role (any litellm provider string, or `scripted`)."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for every role."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY", help="API key for every role."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Run N cases: a seeded subset (the recipe's seed), in suite order."
    ),
    systems: str | None = typer.Option(
        None, "--systems", help="Run only these systems of the recipe (comma-separated names)."
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, max=256, help="Episodes in flight at once (overrides \\[run] concurrency)."
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="The run's seed (case subset, bootstrap); overrides the recipe's."
    ),
    out: Path | None = typer.Option(None, "--out", help="The run folder (an existing one is resumed)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    preflight: bool = typer.Option(
        True, "--preflight/--no-preflight", help="Probe models, keys, data, judge fit and the web before any episode."
    ),
    executor: ExecutorName | None = typer.Option(
        None,
        "--executor",
        help="Where episodes run: local (this process) or ray (a cluster); default: the recipe's \\[run] executor.",
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="The Ray cluster (host:port of its head, or 'auto'); implies --executor ray."
    ),
    epochs: int | None = typer.Option(
        None,
        "--epochs",
        min=1,
        max=100,
        help="Run each (case, system) this many times, each with its own seeds (overrides \\[run] epochs).",
    ),
    cache: bool = typer.Option(
        True,
        "--cache/--no-cache",
        help="Answer a request asked before from the shared response cache ($ATELIER_CACHE_DIR/llm, default "
        "~/.cache/atelier/llm; the recipe's \\[cache] dir); --no-cache sends every request to its provider.",
    ),
    budget_usd: float | None = typer.Option(
        None,
        "--budget-usd",
        help="Start no episode that could take the run's spend past this many USD (overrides \\[run] budget_usd); "
        "exit 3 'budget reached' when it stops the run, which a larger budget resumes.",
    ),
) -> None:
    """Run every (case x system) episode of RECIPE; print the run folder's path last."""
    import asyncio

    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.cli._common import run_folder_option
    from atelier.runs.folder.lock import RunFolderLock

    # a folder in use is refused first, within a second: before the imports and checks below
    out = run_folder_option(out)
    lock = RunFolderLock(out).acquire() if out is not None else None

    from atelier.runs.execution.runner import Runner
    from atelier.runs.folder.recipe import load_recipe
    from atelier.runs.reading.outcome import EXIT_INTERRUPTED

    try:  # the runner releases the lock when its run ends; a refusal before it lets it go here
        if ray_address and executor is ExecutorName.local:
            raise ConfigError("--ray-address names a Ray cluster, but --executor is local")
        chosen = executor.value if executor else ("ray" if ray_address else None)
        names = [n.strip() for n in systems.split(",") if n.strip()] if systems else None
        loaded = load_recipe(recipe).with_overrides(
            model=model,
            api_base=api_base,
            api_key=api_key,
            limit=limit,
            concurrency=concurrency,
            seed=seed,
            systems=names,
            executor=chosen,
            ray_address=ray_address,
            epochs=epochs,
            budget_usd=budget_usd,
            cache=None if cache else False,
        )
        from atelier.graphs.pipelines import sandbox_web_notes

        for note in sandbox_web_notes(loaded.systems, loaded.role_models(), loaded.web):
            typer.echo(f"warning: {note}", err=True)
        runner = Runner(
            loaded,
            out,
            progress=progress,
            say=lambda message: typer.echo(message, err=True),
            preflight=preflight,
            lock=lock,
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    try:
        folder = asyncio.run(_stopped_by_sigterm(runner.run()))
    except (KeyboardInterrupt, Terminated) as stop:
        done = runner.already_done + _finished_now(runner)
        again = " ".join(shlex.quote(a) for a in sys.argv[1:])
        if "--out" not in sys.argv:
            again += f" --out {shlex.quote(str(runner.folder.path))}"
        how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
        typer.echo(
            f"\n{how}: {done} of {runner.expected or '?'} episodes are done and kept in "
            f"{runner.folder.results}.\nresume with: atelier {again}",
            err=True,
        )
        raise typer.Exit(EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED) from None
    _print_summary(folder.summary)
    outcome = runner.outcome
    assert outcome is not None  # run() ends by finishing the run
    for line in outcome.lines():
        typer.echo(line, err=True)
    typer.echo(str(folder.path))
    raise typer.Exit(outcome.exit_code)


def _finished_now(runner) -> int:
    from atelier.runs.folder.results import ResultsFile

    try:
        return sum(r.ok for r in ResultsFile(runner.folder.results).load().values()) - runner.already_done
    except Exception:  # noqa: BLE001 - a count for a message; the results file itself is intact
        return 0


def summary_table(summary: dict):
    """The run's scores as a terminal table: per system and judge n, mean, CI and failures; system
    and judge names are never folded (a narrow terminal folds the numbers first)."""
    from rich.table import Table

    from atelier.runs.reading.report import ci_text
    from atelier.runs.reading.terminal_text import name_columns

    table = Table(title="DRY RUN (scripted model)" if summary["dry_run"] else None)
    epochs = summary.get("epochs", 1)
    columns = ("system", "judge", "n", "mean", "95% CI", "failed")
    rows = [
        (
            system,
            judge,
            str(stats["n"]),
            f"{stats['mean']:.3f}" if stats["mean"] is not None else "–",
            ci_text(stats["ci95"], stats["n"]),
            str(entry["errors"] + stats["failed"]),
            *([_spread(stats["epoch_spread"])] if epochs > 1 else []),
        )
        for system, entry in summary["systems"].items()
        for judge, stats in entry["judges"].items()
    ]
    name_columns(table, (*columns, "epoch sd") if epochs > 1 else columns, rows, names=2)
    return table


def calls_line(summary: dict) -> str:
    """The run's model calls, tokens and cost: as spent, and uncached (nothing from the response cache)."""
    from atelier.runs.reading.usage import format_cost

    ledger, uncached = summary["ledger"], summary.get("ledger_uncached")
    line = (
        f"model calls: {ledger['calls']} ({ledger['provider_calls']} to providers, {ledger['cache_hits']} cache hits), "
        f"tokens {ledger['prompt_tokens']}+{ledger['completion_tokens']}, cost {format_cost(ledger)}"
    )
    if uncached and uncached.get("cache_hits"):
        line += (
            f"; uncached: tokens {uncached['prompt_tokens']}+{uncached['completion_tokens']}, "
            f"cost {format_cost(uncached)} (the response cache answered {uncached['cache_hit_share']:.0%})"
        )
    return line


def _print_summary(path: Path) -> None:
    import json

    from atelier.runs.cli._common import table_console

    summary = json.loads(path.read_text(encoding="utf-8"))
    console = table_console(stderr=True)
    from atelier.runs.reading.report import interval_warnings

    console.print(summary_table(summary))
    for line in interval_warnings(summary):  # too few clusters, untestable comparisons, unequal n
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(calls_line(summary), markup=False, highlight=False)


def _spread(spread: dict) -> str:
    """The between-epoch spread of one system and judge: the mean per-case sd (and the sd of the epoch means)."""
    case, means = spread["mean_case_std"], spread["epoch_means_std"]
    return "–" if case is None else f"{case:.3f}" + (f" ({means:.3f})" if means is not None else "")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run)
