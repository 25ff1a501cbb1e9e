"""Runs from Python (a notebook, a script): `atelier.run` and `atelier.arun` (also here).

    import atelier
    run = atelier.run("quickstart", limit=2)      # a shipped recipe's name, a TOML path, a dict or a Recipe
    run.summary, run.results, run.ledger, run.to_pandas()

`run` blocks until the run ends and is safe where an event loop is already running (Jupyter). In
async code, `await atelier.arun(...)`: the run goes on in a thread with an event loop of its own —
its imports, its set-up and its work — so the caller's loop (a notebook's widgets) runs none of it
(it still shares the GIL: a first run's imports and plots pause it for up to a few tenths of a
second, measured 100-300 ms, against the whole run before); cancelling the await cancels the run. Overrides are the command line's (`model`, `limit`,
`systems`, `concurrency`, `seed`, `epochs`, `budget_usd`, `executor`, `ray_address`, `api_base`,
`api_key`, `out_dir`), plus `out` (the run folder: an existing one is resumed), `progress`
(default off) and `preflight` (default on).

A dict recipe may hold the objects themselves where a recipe names a plugin — a memory backend or
judge class, a pipeline's graph factory or compiled graph, a benchmark's loader or `BenchmarkSpec`:
each is named by its import path (`module:attr`, as `config.json` records it), which must lead
back to the same object. One defined in `__main__` (a notebook cell, a script) is `__main__:Name`:
it runs in this process, and resuming or rescoring the run needs it defined there again; a run on
Ray refuses it (its workers import plugins by path).

This module imports nothing of Atelier's at import time: `atelier.arun` costs the caller's loop
nothing to look up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from atelier.runs.execution.runner import Runner
    from atelier.runs.folder.recipe import Recipe
    from atelier.runs.reading.run_handle import Run

RUN_OPTIONS = ("out", "progress", "preflight")


def recipe_overrides() -> tuple[str, ...]:
    """What `Recipe.with_overrides` takes: the command line's overrides."""
    from atelier.runs.folder.recipe import Recipe

    return tuple(p for p in inspect.signature(Recipe.with_overrides).parameters if p != "self")


def as_recipe(recipe_or_path: Recipe | dict[str, Any] | str | Path) -> Recipe:
    """A Recipe from itself, recipe data (a dict as the TOML would hold it, plugin objects named by
    their import path), a TOML file's path, or the name of a shipped recipe (`quickstart`)."""
    from atelier.runs.folder.recipe import Recipe, load_recipe, named_plugin_objects, parse_recipe

    if isinstance(recipe_or_path, Recipe):
        return recipe_or_path
    if isinstance(recipe_or_path, dict):
        return parse_recipe(named_plugin_objects(recipe_or_path, source="<dict>"), source="<dict>")
    return load_recipe(recipe_or_path if isinstance(recipe_or_path, str) else Path(recipe_or_path).expanduser())


def runner_for(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Runner:
    """The Runner of `recipe_or_path` with `overrides` (a ConfigError names an unknown one)."""
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.benchmarks.common.suggest import did_you_mean
    from atelier.runs.execution.runner import Runner
    from atelier.runs.folder.recipe import plugins_used

    known = recipe_overrides()
    unknown = sorted(set(overrides) - set(known) - set(RUN_OPTIONS))
    if unknown:
        hint = did_you_mean(unknown[0], (*known, *RUN_OPTIONS))
        raise ConfigError(
            f"unknown override {', '.join(map(repr, unknown))}; valid: {', '.join((*known, *RUN_OPTIONS))}"
            + (f"; {hint}" if hint else "")
        )
    recipe = as_recipe(recipe_or_path).with_overrides(**{k: v for k, v in overrides.items() if k in known})
    in_main = [p["target"] for p in plugins_used(recipe) if p["target"].startswith("__main__:")]
    if in_main and recipe.run.executor == "ray":
        raise ConfigError(
            f"{', '.join(in_main)}: defined in __main__, which Ray's workers cannot import; move it into a "
            "module of your own and pass it from there"
        )
    out = overrides.get("out")
    return Runner(
        recipe,
        Path(out).expanduser() if out is not None else None,
        progress=bool(overrides.get("progress", False)),
        preflight=bool(overrides.get("preflight", True)),
    )


async def _run_here(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Run:
    """The run, start to end, on the current loop (the run's own thread)."""
    from atelier.runs.reading.run_handle import Run

    runner = runner_for(recipe_or_path, overrides)
    folder = await runner.run()
    return Run(folder.path, outcome=runner.outcome)


def _run_in_thread(
    recipe_or_path: Recipe | dict[str, Any] | str | Path,
    overrides: dict[str, Any],
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[Run]]],
) -> Run:
    """The run on a loop of this thread's own; `started` learns its loop and task (to cancel it)."""

    async def main() -> Run:
        task = asyncio.current_task()
        assert task is not None
        started.set_result((asyncio.get_running_loop(), task))
        return await _run_here(recipe_or_path, overrides)

    return asyncio.run(main())


async def arun(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """`run`, awaited. The run goes on in a thread with its own event loop, so nothing of it
    (imports, loading the recipe and the cases, building graphs, the episodes) runs on the
    caller's loop; cancelling this await cancels the run and waits for its thread to end."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Run] = loop.create_future()
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[Run]]] = (
        concurrent.futures.Future()
    )

    def settle(result: Run | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(cast("Run", result))
        else:
            done.set_exception(error)

    def work() -> None:
        result, error = None, None
        try:
            result = _run_in_thread(recipe_or_path, overrides, started)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's await, which raises it
            error = exc
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody awaits the run
            loop.call_soon_threadsafe(settle, result, error)

    thread = threading.Thread(target=work, name="atelier-run")
    thread.start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        run_loop, task = await asyncio.wrap_future(started)  # set as soon as the run's loop starts
        with contextlib.suppress(RuntimeError):  # that loop closed: the run has ended
            run_loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(thread.join)
        raise


def run(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """Run a recipe to its end and return the `Run`. Inside a running event loop (Jupyter), the run
    goes on in a thread with a loop of its own while this call waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run_here(recipe_or_path, overrides))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="atelier-run") as pool:
        return pool.submit(lambda: asyncio.run(_run_here(recipe_or_path, overrides))).result()
