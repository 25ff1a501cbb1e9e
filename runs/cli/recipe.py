"""`atelier recipe ...`: list the shipped recipes, start a new one, check one, forecast its cost."""

from __future__ import annotations

from pathlib import Path

import typer

recipe_app = typer.Typer(help="Recipes: list the shipped ones, start one, check and price it.", no_args_is_help=True)
RECIPE_HELP = "A recipe TOML file, or a shipped recipe by name (`atelier recipe list`)."


@recipe_app.command("check")
def check(
    path: Path = typer.Argument(..., help=RECIPE_HELP),
    model: str | None = typer.Option(
        None, "--model", help="Check the recipe as `run --model` would run it: this model for every role."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for every role."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY", help="API key for every role."),
    preflight: bool = typer.Option(
        False,
        "--preflight",
        help="Also run the run's preflight: probe every model, check keys, data checksums, judge fit and the web "
        "(always with --model or --api-base).",
    ),
) -> None:
    """Validate FILE against the registered benchmarks, pipelines, memory backends, judges and web providers
    (including their API keys, and every model's), and check that the benchmark's cases carry what each
    judge needs and keep the benchmark contract. With
    --model (--api-base, --api-key) the recipe is checked, and preflighted, as `atelier run` would run it
    with the same options (every model probed: a missing or rejected key is exit 2); the models each
    role would use are printed."""
    from atelier.agents.judges.base import check_judge_fit, create_judge
    from atelier.benchmarks.registry import get_benchmark
    from atelier.graphs.context import check_hidden_facets
    from atelier.graphs.pipelines import check_systems_available, sandbox_web_notes
    from atelier.runs.folder.recipe import load_recipe
    from atelier.tools.web import check_web_config

    recipe = load_recipe(path).with_overrides(model=model, api_base=api_base, api_key=api_key)
    recipe.check_roles_named()
    check_web_config(recipe.web)
    check_systems_available(recipe.systems)
    b = recipe.benchmark
    cases = recipe.cases()
    check_hidden_facets(cases, recipe.systems)
    check_judge_fit([create_judge(j) for j in recipe.judges], cases, b.name, [s.name for s in recipe.systems])
    spec = get_benchmark(b.name)
    systems = ", ".join(f"{s.name} [{s.pipeline} + {s.memory['backend']}]" for s in recipe.systems)
    judges = ", ".join(j["name"] for j in recipe.judges) or "none"
    roles = recipe.role_models()
    models = ", ".join(
        f"{role} {next((roles[r].model for r in fallback if r in recipe.models), roles[fallback[-1]].model)}"
        for role, fallback in recipe.roles_used().items()
    )
    limit = f", limit {b.limit}" if b.limit else ""
    import asyncio

    from atelier.runs.execution.preflight import PreflightError, background_problems, model_problems, model_uses
    from atelier.runs.execution.preflight import preflight as run_preflight
    from atelier.runs.execution.runner import check_system_settings

    check_system_settings(cases, recipe)
    if preflight or model is not None or api_base is not None:  # checked as `run` with them would run it
        passed = asyncio.run(run_preflight(recipe, cases))
        typer.echo(f"preflight ok ({passed.seconds:.1f} s, {len(passed.calls)} probe calls)", err=True)
    else:  # the preflight's checks that call nothing: each model's key, no background run asked of a chat model
        problems = asyncio.run(model_problems(model_uses(recipe), {})) + background_problems(recipe)
        if problems:
            raise PreflightError(problems, skip="(`--preflight` also probes every model, the data and the web)")
    for note in sandbox_web_notes(recipe.systems, recipe.role_models(), recipe.web):
        typer.echo(f"warning: {note}", err=True)
    typer.echo(
        f"ok: {path}: benchmark {b.name} (split {b.split or spec.split_default}, "
        f"setting {b.setting or spec.setting_default}{limit}); systems: {systems}; judges: {judges}; "
        f"models: {models}"
    )


@recipe_app.command("cost")
def cost(
    path: Path = typer.Argument(..., help=RECIPE_HELP),
    model: str | None = typer.Option(None, "--model", help="Price the run with this model on every role."),
    api_base: str | None = typer.Option(None, "--api-base", help="The endpoint --model is served at."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Forecast N cases only: the seeded subset a run with --limit N takes."
    ),
    sample: int = typer.Option(2, "--sample", min=1, max=20, help="Cases measured by the scripted dry run."),
    as_json: bool = typer.Option(False, "--json", help="Print the forecast as JSON."),
) -> None:
    """Forecast a run's calls, tokens and dollars per role and system, as a low-high range, with no
    provider call: prompts measured by a scripted dry run on a sample of the cases, completions
    bounded by each role's max_tokens, prices from the role's own or litellm's cost map."""
    from rich.table import Table

    from atelier.benchmarks.controls import CONTROL_MARK
    from atelier.runs.cli._common import print_json, table_console
    from atelier.runs.execution.cost import Span, forecast, format_usd
    from atelier.runs.execution.runner import dry_run_ledger
    from atelier.runs.folder.recipe import load_recipe
    from atelier.runs.reading.terminal_text import name_columns

    recipe = load_recipe(path).with_overrides(model=model, api_base=api_base, limit=limit)
    recipe.check_roles_named()
    predicted = forecast(recipe, run=dry_run_ledger, sample=sample)
    if as_json:
        print_json(predicted.model_dump(mode="json"))
        return
    table = Table(
        title=f"{predicted.recipe}: {predicted.episodes} episodes (measured on {predicted.sampled_cases} "
        "cases, scripted dry run)"
    )
    rows = [
        (
            role.role,
            role.model,
            f"{role.calls.low:,.0f} – {role.calls.high:,.0f}",
            f"{role.prompt_tokens.low:,.0f} – {role.prompt_tokens.high:,.0f}",
            f"{role.completion_tokens.low:,.0f} – {role.completion_tokens.high:,.0f}",
            format_usd(role.usd),
        )
        for role in predicted.roles.values()
    ]
    name_columns(table, ("role", "model", "calls", "prompt tokens", "completion tokens", "USD"), rows, names=2)
    console = table_console()
    console.print(table)
    calls = predicted.total["calls"]
    console.print(
        f"total: {calls.low:,.0f} – {calls.high:,.0f} calls, {format_usd(predicted.total['usd'])}"
        + (
            f" (no price for: {', '.join(predicted.total['unpriced_roles'])})"
            if predicted.total["unpriced_roles"]
            else ""
        )
    )
    controlled = {name: line for name, line in predicted.systems.items() if CONTROL_MARK in name}
    if controlled:  # the counterfactual controls' share of it (`[run] controls`)
        calls = sum((line["calls"] for line in controlled.values()), Span.of(0, 0))
        usd = (
            None
            if any(line["usd"] is None for line in controlled.values())
            else sum((line["usd"] for line in controlled.values()), Span.of(0, 0, 6))
        )
        console.print(
            f"of which controls ({', '.join(controlled)}): {calls.low:,.0f} – {calls.high:,.0f} calls, {format_usd(usd)}"
        )
    for note in predicted.notes:
        console.print(f"note: {note}")


@recipe_app.command("list")
def list_recipes(
    as_json: bool = typer.Option(False, "--json", help="Print name, description and path as JSON."),
) -> None:
    """The recipes shipped with Atelier, by the name `atelier run NAME` takes."""
    from atelier.runs.cli._common import print_json
    from atelier.runs.folder.shipped import describe, shipped_recipes

    shipped = {name: (describe(path), path) for name, path in shipped_recipes().items()}
    if as_json:
        print_json([{"name": n, "description": d, "path": str(p)} for n, (d, p) in shipped.items()])
        return
    width = max(map(len, shipped))
    for name, (description, _) in shipped.items():
        typer.echo(f"{name:<{width}}  {description}")


@recipe_app.command("new")
def new(
    name: str = typer.Argument(..., help="The recipe's name; NAME.toml is written."),
    folder: Path = typer.Option(Path("."), "--dir", help="Where to write NAME.toml."),
) -> None:
    """Write NAME.toml, a commented recipe to start from (two systems, one judge, the scripted model)."""
    import re

    from atelier.benchmarks.common import no_follow
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.folder.shipped import new_recipe_text

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(f"recipe name {name!r}: use letters, digits, '_', '.' and '-' (at most 64), e.g. my_study")
    path = folder / f"{name}.toml"
    try:
        with no_follow.open_file(path, "x") as fh:  # never over an existing file
            fh.write(new_recipe_text(name))
    except FileExistsError:
        raise ConfigError(f"{path} exists; choose another name or remove it first") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    typer.echo(f"wrote {path}; check it with: atelier recipe check {path}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
