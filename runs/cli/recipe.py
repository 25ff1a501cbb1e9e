"""`atelier recipe check FILE`: validate a recipe without running it."""

from __future__ import annotations

from pathlib import Path

import typer

recipe_app = typer.Typer(help="Recipes: check them before running.", no_args_is_help=True)


@recipe_app.command("check")
def check(
    path: Path = typer.Argument(..., help="A recipe TOML file."),
    preflight: bool = typer.Option(False, "--preflight", help="Also run the run's preflight: probe every model, "
                                   "check keys, data checksums, judge fit and the web."),
) -> None:
    """Validate FILE against the registered benchmarks, pipelines, memory backends, judges and web providers
    (including their API keys), and check that the benchmark's cases carry what each judge needs."""
    from agents.judges.base import check_judge_fit, create_judge
    from benchmarks.registry import get_benchmark
    from graphs.context import check_hidden_facets
    from graphs.pipelines import check_systems_available
    from runs.recipe import load_recipe

    from tools.web import check_web_config

    recipe = load_recipe(path)
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
    limit = f", limit {b.limit}" if b.limit else ""
    if preflight:
        import asyncio

        from runs.preflight import preflight as run_preflight

        passed = asyncio.run(run_preflight(recipe, cases))
        typer.echo(f"preflight ok ({passed.seconds:.1f} s, {len(passed.calls)} probe calls)", err=True)
    typer.echo(
        f"ok: {path}: benchmark {b.name} (split {b.split or spec.split_default}, "
        f"setting {b.setting or spec.setting_default}{limit}); systems: {systems}; judges: {judges}"
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
