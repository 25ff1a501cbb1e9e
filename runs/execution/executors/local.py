"""`local`: episodes run as asyncio tasks in the runner's own process (the default)."""

from __future__ import annotations

from typing import Any

from atelier.runs.execution.executors.base import Episode, EpisodeFn
from atelier.runs.folder.results import ResultRecord


class LocalExecutor:
    name = "local"

    def __init__(self, episode_fn: EpisodeFn, graph: Any) -> None:
        self.episode_fn = episode_fn
        self.graph = graph  # the episode graph, checkpointed in the run folder

    async def run(self, episode: Episode) -> ResultRecord:
        return await self.episode_fn(self.graph, episode.case, episode.system, episode.context)

    async def aclose(self) -> None:
        return None
