"""`local`: episodes run as asyncio tasks in the runner's own process (the default)."""

from __future__ import annotations

from typing import Any

from runs.executors.base import Episode, EpisodeFn
from runs.results import ResultRecord


class LocalExecutor:
    name = "local"

    def __init__(self, episode_fn: EpisodeFn, graphs: dict[str, Any]) -> None:
        self.episode_fn = episode_fn
        self.graphs = graphs  # per pipeline, checkpointed in the run folder

    async def run(self, episode: Episode) -> ResultRecord:
        graph = self.graphs[episode.system.pipeline]
        return await self.episode_fn(graph, episode.case, episode.system, episode.context)

    async def aclose(self) -> None:
        return None
