"""Where a run's episodes execute: `local` (asyncio in this process, the default) or `ray` (a Ray
cluster's nodes). The runner only opens one and hands it episodes (`base.Executor`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from atelier.runs.execution.executors.base import Episode, EpisodeFn, Executor
from atelier.runs.execution.executors.local import LocalExecutor

__all__ = ["Episode", "EpisodeFn", "Executor", "open_executor"]


@contextlib.asynccontextmanager
async def open_executor(
    recipe, episode_fn: EpisodeFn, graph: Any, *, run_id: str, run_dir: Path, progress: bool = True
) -> AsyncIterator[Executor]:
    """The recipe's executor (`[run] executor`), closed (its workers stopped) when the block ends."""
    if recipe.run.executor == "local":
        executor: Executor = LocalExecutor(episode_fn, graph)
    else:
        from atelier.runs.execution.executors.ray import RayExecutor, forwarded_env

        key_envs = [s.api_key_env for s in recipe.role_models().values()]
        key_envs += [s.api_key_env for system in recipe.systems for s in system.models.values()]
        key_envs += web_key_envs(recipe.web)
        executor = await RayExecutor(
            episode_fn,
            graph,
            systems=recipe.systems,
            settings=recipe.run.ray,
            concurrency=recipe.run.concurrency,
            run_id=run_id,
            run_dir=run_dir,
            env=forwarded_env(key_envs),
            progress=progress,
        ).start()
    try:
        yield executor
    finally:
        await executor.aclose()


def web_key_envs(web) -> list[str]:
    """The variables the web's search provider and page reader read their API keys from."""
    from atelier.tools.readers.registry import reader_config
    from atelier.tools.search.registry import provider_config

    options = (provider_config(web.provider, web.provider_options), reader_config(web.reader, web.reader_options))
    return [name for o in options if (name := getattr(type(o), "api_key_env", None))]
