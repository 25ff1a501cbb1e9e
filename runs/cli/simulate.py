"""`atelier simulate ...`: the simulated user outside runs.

- `simulate history` synthesizes PDR-Bench dynamic contexts (a contexts file + manifest), or
  continues the history an existing `--out` holds;
- `simulate check` checks an existing contexts file: item content, the protocol, and (with a
  model) reversibility;
- `simulate feedback` rates a run's responses as its users would (BESPOKE criteria) and writes
  them as response–judgment pairs (`[benchmark] rj_pairs_file` feeds them to later runs).
Each prints JSON on stdout and ends like `atelier run` (runs.outcome): counts and the most common
reasons on stderr; exit 0 when everything succeeded, 3 when a user, a rating, a content check,
the protocol or the reversibility gate failed or a history is incomplete (what succeeded is still
written), 2 on bad input.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import typer

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli._common import print_json


def _settings(
    model: str,
    api_base: str | None,
    api_key_env: str | None,
    temperature: float | None,
    seed: int,
    max_retries: int | None = None,
):
    from atelier.agents.models.settings import ModelSettings

    values: dict[str, Any] = {
        "model": model,
        "api_base": api_base,
        "api_key_env": api_key_env,
        "seed": seed,
        "max_retries": max_retries,
    }
    if temperature is not None:
        values["temperature"] = temperature
    return ModelSettings(**{k: v for k, v in values.items() if v is not None})


HISTORY_ROLES = ("user_sim", "history_writer", "history_checker")
MIN_RECOVERED_HELP = (
    "Reversibility gate: the least share of persona facets the inverse pass must recover, per user "
    "and pooled over users (default 0.5); any "
    "contradicted facet fails too."
)


def recipe_roles(path: Path) -> dict:
    """The simulated user's model settings in a recipe's `[models]` table (`user_sim`,
    `history_writer`, `history_checker`); its other tables and roles (a run recipe's systems and
    judges) are not read. Mistakes name the file and the field."""
    import tomllib

    from pydantic import ValidationError

    from atelier.agents.models.settings import ModelSettings
    from atelier.benchmarks.common.suggest import did_you_mean
    from atelier.runs.folder.recipe import KNOWN_ROLES
    from atelier.runs.folder.shipped import find_recipe

    path = find_recipe(path).path  # a file, or a shipped recipe by name, as every command finds one
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read recipe {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"{path}: models: expected a table of roles ([models.history_writer], ...)")
    unknown = [role for role in models if role not in KNOWN_ROLES]
    if unknown:
        hint = did_you_mean(unknown[0], KNOWN_ROLES)
        raise ConfigError(
            f"{path}: models.{unknown[0]}: not a role; the simulated user's are {', '.join(HISTORY_ROLES)}"
            + (f"; {hint}" if hint else "")
        )
    roles = {}
    for role in HISTORY_ROLES:
        if role in models:
            try:
                roles[role] = ModelSettings.model_validate(models[role])
            except ValidationError as exc:
                raise ConfigError(f"{path}: models.{role}.{_first_error(exc)}") from None
    return roles


def history_models(
    recipe: Path | None,
    model: str | None,
    checker_model: str | None,
    *,
    api_base: str | None,
    api_key_env: str | None,
    temperature: float | None,
    seed: int,
    max_retries: int | None,
    max_tokens: int | None,
) -> dict:
    """The writer's and the checker's settings: the recipe's roles (`history_writer`, else `user_sim`;
    `history_checker`, else the writer's), then what the command line says, which wins: `--model`
    (the writer, and the checker unless `--checker-model` or the recipe names one), `--max-tokens`,
    `--api-base`, `--api-key-env`, `--max-retries` (both roles), `--temperature` (the writer) and
    `--seed` (both: part of what decides the answers)."""
    from atelier.agents.models.settings import ModelSettings

    roles = recipe_roles(recipe) if recipe else {}
    writer = roles.get("history_writer") or roles.get("user_sim") or ModelSettings()
    checker = roles.get("history_checker")
    if model:
        writer = _settings(model, api_base, api_key_env, temperature, seed, max_retries)
    if checker_model:
        checker = _settings(checker_model, api_base, api_key_env, None, seed, max_retries)
    if checker is None:
        if model:  # the command line's writer checks too (at the default temperature)
            checker = writer.model_copy(update={"temperature": ModelSettings().temperature})
        else:  # as the gateway falls back: history_checker -> user_sim; else the writer
            checker = roles.get("user_sim") or writer
    common = {
        "seed": seed,
        "api_base": api_base,
        "api_key_env": api_key_env,
        "max_retries": max_retries,
        "max_tokens": max_tokens,
    }
    common = {k: v for k, v in common.items() if v is not None}
    try:
        writer = ModelSettings.model_validate(
            {**writer.model_dump(), **common, **({"temperature": temperature} if temperature is not None else {})}
        )
        checker = ModelSettings.model_validate({**checker.model_dump(), **common})
    except ValueError as exc:
        raise ConfigError(f"simulate: {_first_error(exc)}") from None
    return {"history_writer": writer, "history_checker": checker}


def history(
    benchmark: str = typer.Option("pdr", "--benchmark", help="Benchmark whose personas get a history (pdr)."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Folder for contexts_<language>.jsonl, manifest.json, synthesis.jsonl, "
        "ledger.jsonl; an existing one is continued.",
    ),
    language: str = typer.Option("en", "--language", help="Persona file and writing language (en | zh)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="The first N personas (file order)."),
    users: str | None = typer.Option(None, "--users", help="Comma-separated user ids instead of --limit."),
    seed: int = typer.Option(0, "--seed", help="Decides the plan (formats, dates, sources) and the models' seed."),
    style: str = typer.Option(
        "pdr", "--style", help="pdr (memories + dialogues) | bespoke (searches + chats) | mixed."
    ),
    items_per_tag: int = typer.Option(5, "--items-per-tag", help="Items per preference tag (at least 5)."),
    items_per_trait: int = typer.Option(1, "--items-per-trait", help="Items per other persona facet."),
    conversational_share: float = typer.Option(0.35, "--conversational-share", help="Target share, 0.2-0.5."),
    period_days: int = typer.Option(90, "--period-days", help="Days the items are spread over."),
    end_date: str = typer.Option("2025-06-30", "--end-date", help="Last day of the period (ISO date)."),
    recipe: Path | None = typer.Option(
        None,
        "--recipe",
        help="A TOML file whose \\[models.user_sim], "
        "\\[models.history_writer] and \\[models.history_checker] set the roles "
        "(a run recipe will do: its other tables are not read).",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Writer (and checker) model: a litellm string, "
        "local/smollm2 or scripted (default: the recipe's, else scripted).",
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    temperature: float | None = typer.Option(None, "--temperature", help="Writer temperature."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="The writer's and checker's max_tokens (local models: 512)."
    ),
    max_tokens_ceiling: int | None = typer.Option(
        None,
        "--max-tokens-ceiling",
        min=1,
        help="An answer cut at max_tokens is asked again with double the budget, up to this (default 4 x max_tokens).",
    ),
    regenerations: int = typer.Option(
        1, "--regenerations", min=0, max=10, help="New drafts per item and session after one was rejected or failed."
    ),
    max_retries: int | None = typer.Option(
        None, "--max-retries", min=0, max=20, help="Retries per model call on timeouts, 429 and 5xx (default 4)."
    ),
    checker_model: str | None = typer.Option(None, "--checker-model", help="Model for the reversibility check."),
    check: bool = typer.Option(True, "--check/--no-check", help="Run the reversibility check."),
    min_recovered: float | None = typer.Option(None, "--min-recovered", min=0.0, max=1.0, help=MIN_RECOVERED_HELP),
    time_limit: float = typer.Option(
        25.0, "--time-limit", min=0.0, help="Minutes; the session then ends cleanly (run again to continue). 0: none."
    ),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Users synthesized at once."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Use the response cache ($ATELIER_CACHE_DIR/llm)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar over users."),
) -> None:
    """Synthesize users' implicit histories under PDR-Bench's annotation protocol; print the manifest's figures."""
    from pydantic import ValidationError

    from atelier.agents.user_sim import HistoryOptions
    from atelier.agents.user_sim.history import WritingEffort
    from atelier.agents.user_sim.reversibility import DEFAULT_MIN_RECOVERED
    from atelier.runs.studies.simulate_history import HistoryJob, choose_users, pdr_personas, run_history_job

    try:
        options = HistoryOptions(
            style=style,
            items_per_tag=items_per_tag,
            items_per_trait=items_per_trait,
            conversational_share=conversational_share,
            period_days=period_days,
            end_date=dt.date.fromisoformat(end_date),
            language=language,
            seed=seed,
        )
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"simulate history: {_first_error(exc)}") from None
    if benchmark != "pdr":
        raise ConfigError(f"--benchmark {benchmark!r}: only pdr reads a contexts file (its option contexts_file)")
    if language not in ("en", "zh"):
        raise ConfigError(f"--language {language!r}: pdr has en and zh")
    models = history_models(
        recipe,
        model,
        checker_model,
        api_base=api_base,
        api_key_env=api_key_env,
        temperature=temperature,
        seed=seed,
        max_retries=max_retries,
        max_tokens=max_tokens,
    )
    _preflight(models)
    chosen = choose_users(pdr_personas(language), users.split(",") if users else None, limit)
    job = HistoryJob(
        benchmark=benchmark,
        users=chosen,
        options=options,
        check=check,
        concurrency=concurrency,
        models=models,
        min_recovered=DEFAULT_MIN_RECOVERED if min_recovered is None else min_recovered,
        time_limit_s=time_limit * 60 or None,
        effort=WritingEffort(max_tokens_ceiling=max_tokens_ceiling, regenerations=regenerations),
    )
    manifest = run_history_job(job, out, cache=cache, progress=progress)
    print_json(
        {
            "out": str(out),
            "contexts_file": str(out / manifest["contexts_file"]),
            "dry_run": manifest["dry_run"],
            "sessions": manifest["sessions"],
            "time_limit_reached": manifest["time_limit_reached"],
            "overall": manifest["overall"],
            "users": {u: f["synthesis"]["status"] for u, f in manifest["per_user"].items()},
            "failed": manifest["failed"],
            "recipe": manifest["recipe"],
        }
    )
    _exit_like_a_run(manifest)


def check(
    contexts: Path = typer.Option(..., "--contexts", help="A contexts file in the pdr loader's format."),
    language: str = typer.Option(
        "en",
        "--language",
        help="Which pdr personas it belongs to (en | zh), and the language its items must be written in.",
    ),
    reversibility: bool | None = typer.Option(
        None,
        "--reversibility/--no-reversibility",
        help="Also run the checker model: its contradiction check and the inverse pass (items per tag then count "
        "what it cited, and the reversibility gate applies). Default: as the `simulate history` that wrote the "
        "file ran them (its folder's manifest.json), else not.",
    ),
    min_recovered: float | None = typer.Option(None, "--min-recovered", min=0.0, max=1.0, help=MIN_RECOVERED_HELP),
    recipe: Path | None = typer.Option(
        None, "--recipe", help="A TOML file whose \\[models.history_checker] (else \\[models.user_sim]) is the checker."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Checker model for --reversibility (default: the recipe's, else scripted)."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="The checker's max_tokens."),
) -> None:
    """Check a contexts file: the content of every item, PDR's annotation protocol (per user and
    overall) and, with --reversibility, the reversibility gate; exit 3 on a violation."""
    import asyncio

    from atelier.agents.user_sim.reversibility import DEFAULT_MIN_RECOVERED
    from atelier.runs.studies.simulate_history import check_contexts, written_with

    job = written_with(contexts)
    if reversibility is None:  # the checks the history was written under, so the two verdicts agree
        reversibility = bool(job and job.check)
    checker = None
    if reversibility and job is not None and job.check and not (recipe or model):
        checker = job.models["history_checker"]
        if min_recovered is None:
            min_recovered = job.min_recovered
    elif reversibility:
        checker = _checker(recipe, model, api_base, api_key_env, max_tokens)
    if checker is not None:
        _preflight({"history_checker": checker})
    gate = DEFAULT_MIN_RECOVERED if min_recovered is None else min_recovered
    report = asyncio.run(check_contexts(contexts, language, checker, min_recovered=gate))
    print_json(report)
    _exit_like_a_run(report)


def feedback(
    run: Path = typer.Option(..., "--run", help="A run folder (runs/out/<run_id>)."),
    out: Path = typer.Option(..., "--out", help="The R-J pairs file to write (JSON Lines)."),
    model: str | None = typer.Option(None, "--model", help="Simulated user's model (default: the run's user_sim)."),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Ratings in flight at once."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Use the response cache ($ATELIER_CACHE_DIR/llm)."),
) -> None:
    """Rate a run's responses as their users would (BESPOKE's four criteria, 1-5 + feedback) into R-J pairs."""
    import asyncio

    from atelier.runs.reading.outcome import EXIT_FAILURES, most_common_lines, reason_of
    from atelier.runs.studies.simulate_feedback import rate_run

    settings = _settings(model, api_base, api_key_env, None, 0) if model else None
    report = asyncio.run(rate_run(run, out, settings, concurrency=concurrency, cache=cache))
    print_json(report)
    failed = report["failed"]
    typer.echo(
        f"responses: {report['rated']} rated, {len(failed)} failed (of {report['rated'] + len(failed)})", err=True
    )
    for line in most_common_lines("rating failures", Counter(reason_of(error) for error in failed.values())):
        typer.echo(line, err=True)
    if failed:
        raise typer.Exit(EXIT_FAILURES)


def _preflight(models: dict) -> None:
    """The run's preflight of the models this command calls (keys, a probe): exit 2, nothing started."""
    import asyncio

    from atelier.runs.execution.preflight import check_models

    asyncio.run(check_models(models))


def _exit_like_a_run(report: dict) -> None:
    """Counts and the most common reasons on stderr; exit 3 when a user failed, is incomplete, or
    fails a check or the gate."""
    from atelier.runs.studies.simulate_history import history_outcome

    code, lines = history_outcome(report)
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(code)


def _checker(
    recipe: Path | None, model: str | None, api_base: str | None, api_key_env: str | None, max_tokens: int | None
) -> Any:
    """The checker model's settings (`history_checker`) from a recipe and the command's flags."""
    return history_models(
        recipe,
        model,
        None,
        api_base=api_base,
        api_key_env=api_key_env,
        temperature=None,
        seed=0,
        max_retries=None,
        max_tokens=max_tokens,
    )["history_checker"]


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


def check_precision(
    labelled: Path | None = typer.Option(
        None, "--labelled", help="Crafted items with their labels (default: the shipped set, history_checks.jsonl)."
    ),
    judge_model: str | None = typer.Option(
        None, "--judge-model", help="Also measure the model judge of contradictions, on this model (a litellm string)."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --judge-model."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Variable holding the API key."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="The judge's max_tokens."),
) -> None:
    """Measure `simulate check` on crafted histories with their labels: per check (offline
    contradiction rules, copies of the persona, near-duplicates, and with --judge-model the model
    judge) what it catches and what it flags wrongly, on the items the rules were tuned on and on
    held-out ones."""
    import sys

    from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK
    from atelier.runs.studies.history_checks import LABELLED, run_measure_checks

    judge = _checker(None, judge_model, api_base, api_key_env, max_tokens) if judge_model is not None else None
    if judge is not None:
        _preflight({"--judge-model": judge})
    figures = run_measure_checks(labelled or LABELLED, judge)
    print_json(figures)
    failed = (figures.get("judge") or {}).get("failed") or {}
    for user, why in failed.items():
        print(f"the judge could not judge {user}'s items: {why}", file=sys.stderr)
    raise typer.Exit(EXIT_FAILURES if failed else EXIT_OK)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    simulate_app = typer.Typer(help="The simulated user: histories, protocol checks, feedback.", no_args_is_help=True)
    simulate_app.command("history")(history)
    simulate_app.command("check")(check)
    simulate_app.command("check-precision")(check_precision)
    simulate_app.command("feedback")(feedback)
    app.add_typer(simulate_app, name="simulate")
