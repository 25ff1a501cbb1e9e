"""`atelier simulate ...`: the simulated user outside runs.

- `simulate history` synthesizes PDR-Bench dynamic contexts (a contexts file + manifest);
- `simulate check` checks an existing contexts file against the protocol (and reversibility);
- `simulate feedback` rates a run's responses as its users would (BESPOKE criteria) and writes
  them as response–judgment pairs (`[benchmark] rj_pairs_file` feeds them to later runs).
Each prints JSON on stdout and ends like `atelier run` (runs.outcome): counts and the most common
reasons on stderr; exit 0 when everything succeeded, 3 when a user, a rating or the protocol
failed (what succeeded is still written), 2 on bad input.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

from benchmarks.errors import ConfigError
from runs.cli._common import print_json


def _settings(model: str, api_base: Optional[str], api_key_env: Optional[str], temperature: Optional[float], seed: int,
              max_retries: Optional[int] = None):
    from agents.settings import ModelSettings

    values = {"model": model, "api_base": api_base, "api_key_env": api_key_env, "seed": seed, "max_retries": max_retries}
    if temperature is not None:
        values["temperature"] = temperature
    return ModelSettings(**{k: v for k, v in values.items() if v is not None})


def history(
    benchmark: str = typer.Option("pdr", "--benchmark", help="Benchmark whose personas get a history (pdr)."),
    out: Path = typer.Option(..., "--out", help="Folder for contexts_<language>.jsonl, manifest.json, ledger.jsonl."),
    language: str = typer.Option("en", "--language", help="Persona file and writing language (en | zh)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="The first N personas (file order)."),
    users: Optional[str] = typer.Option(None, "--users", help="Comma-separated user ids instead of --limit."),
    seed: int = typer.Option(0, "--seed", help="Decides the plan (formats, dates, sources) and the models' seed."),
    style: str = typer.Option("pdr", "--style",
                              help="pdr (memories + dialogues) | bespoke (searches + chats) | mixed."),
    items_per_tag: int = typer.Option(5, "--items-per-tag", help="Items per preference tag (at least 5)."),
    items_per_trait: int = typer.Option(1, "--items-per-trait", help="Items per other persona facet."),
    conversational_share: float = typer.Option(0.35, "--conversational-share", help="Target share, 0.2-0.5."),
    period_days: int = typer.Option(90, "--period-days", help="Days the items are spread over."),
    end_date: str = typer.Option("2025-06-30", "--end-date", help="Last day of the period (ISO date)."),
    model: str = typer.Option("scripted", "--model", help="Writer (and checker) model: a litellm string or scripted."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Writer temperature."),
    max_retries: Optional[int] = typer.Option(None, "--max-retries", min=0, max=20,
                                              help="Retries per model call on timeouts, 429 and 5xx (default 4)."),
    checker_model: Optional[str] = typer.Option(None, "--checker-model", help="Model for the reversibility check."),
    check: bool = typer.Option(True, "--check/--no-check", help="Run the reversibility check."),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Users synthesized at once."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Use the response cache ($ATELIER_CACHE_DIR/llm)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar over users."),
) -> None:
    """Synthesize users' implicit histories under PDR-Bench's annotation protocol; print the manifest's figures."""
    from pydantic import ValidationError

    from agents.user_sim import HistoryOptions
    from runs.simulate_history import HistoryJob, choose_users, pdr_personas, run_history_job

    try:
        options = HistoryOptions(
            style=style, items_per_tag=items_per_tag, items_per_trait=items_per_trait,
            conversational_share=conversational_share, period_days=period_days,
            end_date=dt.date.fromisoformat(end_date), language=language, seed=seed,
        )
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"simulate history: {_first_error(exc)}") from None
    if benchmark != "pdr":
        raise ConfigError(f"--benchmark {benchmark!r}: only pdr reads a contexts file (its option contexts_file)")
    if language not in ("en", "zh"):
        raise ConfigError(f"--language {language!r}: pdr has en and zh")
    writer = _settings(model, api_base, api_key_env, temperature, seed, max_retries)
    checker = _settings(checker_model or model, api_base, api_key_env, None, seed, max_retries)
    chosen = choose_users(pdr_personas(language), users.split(",") if users else None, limit)
    job = HistoryJob(benchmark=benchmark, users=chosen, options=options, check=check, concurrency=concurrency,
                     models={"history_writer": writer, "history_checker": checker})
    manifest = run_history_job(job, out, cache=cache, progress=progress)
    print_json({
        "out": str(out),
        "contexts_file": str(out / manifest["contexts_file"]),
        "dry_run": manifest["dry_run"],
        "overall": manifest["overall"],
        "failed": manifest["failed"],
        "recipe": manifest["recipe"],
    })
    _exit_like_a_run(manifest)


def check(
    contexts: Path = typer.Option(..., "--contexts", help="A contexts file in the pdr loader's format."),
    language: str = typer.Option("en", "--language", help="Which pdr personas it belongs to (en | zh)."),
    reversibility: bool = typer.Option(False, "--reversibility/--no-reversibility",
                                       help="Also run the inverse pass (needs --model)."),
    model: str = typer.Option("scripted", "--model", help="Checker model for --reversibility."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
) -> None:
    """Check a contexts file against PDR's annotation protocol (per user and overall); exit 3 on a violation."""
    import asyncio

    from runs.simulate_history import check_contexts

    checker = _settings(model, api_base, api_key_env, None, 0) if reversibility else None
    report = asyncio.run(check_contexts(contexts, language, checker))
    print_json(report)
    _exit_like_a_run(report)


def feedback(
    run: Path = typer.Option(..., "--run", help="A run folder (runs/out/<run_id>)."),
    out: Path = typer.Option(..., "--out", help="The R-J pairs file to write (JSON Lines)."),
    model: Optional[str] = typer.Option(None, "--model", help="Simulated user's model (default: the run's user_sim)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Ratings in flight at once."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Use the response cache ($ATELIER_CACHE_DIR/llm)."),
) -> None:
    """Rate a run's responses as their users would (BESPOKE's four criteria, 1-5 + feedback) into R-J pairs."""
    import asyncio

    from runs.outcome import EXIT_FAILURES, most_common_lines, reason_of
    from runs.simulate_feedback import rate_run

    settings = _settings(model, api_base, api_key_env, None, 0) if model else None
    report = asyncio.run(rate_run(run, out, settings, concurrency=concurrency, cache=cache))
    print_json(report)
    failed = report["failed"]
    typer.echo(f"responses: {report['rated']} rated, {len(failed)} failed (of {report['rated'] + len(failed)})", err=True)
    for line in most_common_lines("rating failures", Counter(reason_of(error) for error in failed.values())):
        typer.echo(line, err=True)
    if failed:
        raise typer.Exit(EXIT_FAILURES)


def _exit_like_a_run(report: dict) -> None:
    """Counts and the most common reasons on stderr; exit 3 when a user failed or breaks the protocol."""
    from runs.simulate_history import history_outcome

    code, lines = history_outcome(report)
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(code)


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    simulate_app = typer.Typer(help="The simulated user: histories, protocol checks, feedback.", no_args_is_help=True)
    simulate_app.command("history")(history)
    simulate_app.command("check")(check)
    simulate_app.command("feedback")(feedback)
    app.add_typer(simulate_app, name="simulate")
