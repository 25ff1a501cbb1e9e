"""The executor seam: the runner hands an executor episodes and gets each one's `ResultRecord` back.

An episode is one (case, system, epoch) of a run with the settings it runs under (`EpisodeContext`, plain
data). How it runs is the runner's own episode function (`EpisodeFn`: the episode graph in, the
record out); where it runs is the executor's business: `local` awaits it in this process, `ray`
on a cluster's nodes. Either way the driver alone writes the run folder.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from atelier.benchmarks.case import Case
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.runs.folder.epochs import epoch_of
from atelier.runs.folder.results import ResultRecord, result_key

# (episode graph, case, system, context) -> the episode's record; never raises for a failed episode
EpisodeFn = Callable[[Any, Case, SystemSpec, EpisodeContext], Awaitable[ResultRecord]]


@dataclass(frozen=True)
class Episode:
    case: Case
    system: SystemSpec
    context: EpisodeContext

    @property
    def epoch(self) -> int:
        return epoch_of(self.context, self.system)

    @property
    def control(self) -> str | None:
        return self.context.control.kind if self.context.control is not None else None

    @property
    def key(self) -> str:
        return result_key(self.case.id, self.system.name, self.epoch, self.control)


class Executor(Protocol):
    """Runs episodes; `run` may be awaited for many episodes at once (the runner bounds how many)."""

    name: str

    async def run(self, episode: Episode) -> ResultRecord: ...

    async def aclose(self) -> None: ...
