"""Runs from Python (a notebook, a script): `atelier.run` and `atelier.arun` (also here).

    import atelier
    run = atelier.run("quickstart", limit=2)      # a shipped recipe's name, a TOML path, a dict or a Recipe
    run.summary, run.results, run.ledger, run.to_pandas()

`run` blocks until the run ends and is safe where an event loop is already running (Jupyter): the
run then goes on in a thread of its own with its own loop. In async code, `await atelier.arun(...)`.
Overrides are the command line's (`model`, `limit`, `systems`, `concurrency`, `seed`, `epochs`,
`budget_usd`, `executor`, `ray_address`, `api_base`, `api_key`, `out_dir`), plus `out` (the run
folder: an existing one is resumed), `progress` (default off) and `preflight` (default on).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from pathlib import Path
from typing import Any

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.folder.recipe import Recipe, load_recipe, parse_recipe
from atelier.runs.reading.run_handle import Run

RECIPE_OVERRIDES = tuple(p for p in inspect.signature(Recipe.with_overrides).parameters if p != "self")
RUN_OPTIONS = ("out", "progress", "preflight")


def as_recipe(recipe_or_path: Recipe | dict[str, Any] | str | Path) -> Recipe:
    """A Recipe from itself, recipe data (a dict as the TOML would hold it), a TOML file's path, or
    the name of a shipped recipe (`quickstart`; `atelier recipe list`)."""
    if isinstance(recipe_or_path, Recipe):
        return recipe_or_path
    if isinstance(recipe_or_path, dict):
        return parse_recipe(recipe_or_path, source="<dict>")
    return load_recipe(Path(recipe_or_path).expanduser())


async def arun(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """`run`, awaited in the caller's event loop."""
    runner = runner_for(recipe_or_path, overrides)
    folder = await runner.run()
    return Run(folder.path, outcome=runner.outcome)


def runner_for(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Any:
    """The Runner of `recipe_or_path` with `overrides` (a ConfigError names an unknown one)."""
    from atelier.runs.execution.runner import Runner

    unknown = sorted(set(overrides) - set(RECIPE_OVERRIDES) - set(RUN_OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown override {', '.join(map(repr, unknown))}; valid: {', '.join((*RECIPE_OVERRIDES, *RUN_OPTIONS))}"
        )
    recipe = as_recipe(recipe_or_path).with_overrides(**{k: v for k, v in overrides.items() if k in RECIPE_OVERRIDES})
    out = overrides.get("out")
    return Runner(
        recipe,
        Path(out).expanduser() if out is not None else None,
        progress=bool(overrides.get("progress", False)),
        preflight=bool(overrides.get("preflight", True)),
    )


def run(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """Run a recipe to its end and return the `Run`. Inside a running event loop (Jupyter), the run
    goes on in a thread with a loop of its own while this call waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun(recipe_or_path, **overrides))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="atelier-run") as pool:
        return pool.submit(lambda: asyncio.run(arun(recipe_or_path, **overrides))).result()
