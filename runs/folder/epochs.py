"""Epochs (`[run] epochs = k`): each (case, system) run k times, each epoch an independent sample.

An epoch of a system runs under a context of its own (`epoch_context`); which epoch an episode is
can be read back from that context alone (`epoch_of`), so an executor that gets only the context
(a Ray worker, a retried episode) keys its record and its checkpoint thread by epoch too.
"""

from __future__ import annotations

from typing import Any

from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.controls import control_name
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.runs.folder.resume import SYSTEM_SIDE

EPOCH_MARK = "@epoch"


def epoch_context(context: EpisodeContext, epoch: int) -> EpisodeContext:
    """The context of one epoch of a system (`[run] epochs`). The first epoch's is the system's own,
    so a run of one epoch is the run it always was. A later epoch is an independent run of the same
    system: the seeds of its system-side roles (`runs.resume.SYSTEM_SIDE`: the system's, the memory's
    and the simulated user's) and the run's seed (random profile, gold noise) are moved by
    `epoch - 1`, so every call is a new sample (and a new response-cache key); the judges keep
    their seeds, so the spread between epochs is the system's, not the judges' (judges have
    `repeats`). It runs under the name `<system>@epoch<k>`, which gives it memory and work folders
    of its own (`memory/<system>@epoch<k>/`); results and the ledger keep the system's name."""
    if epoch == 1:
        return context
    shift = epoch - 1

    def moved(models: dict[str, ModelSettings]) -> dict[str, ModelSettings]:
        return {
            role: s.model_copy(update={"seed": (s.seed or 0) + shift}) if role in SYSTEM_SIDE else s
            for role, s in models.items()
        }

    system = context.system.model_copy(
        update={"name": f"{context.system.name}{EPOCH_MARK}{epoch}", "models": moved(context.system.models)}
    )
    return context.model_copy(update={"models": moved(context.models), "system": system, "seed": context.seed + shift})


def run_epochs(config: dict[str, Any]) -> int:
    """How many epochs a run folder's config.json asked for (`[run] epochs`; 1 before epochs existed)."""
    return int((config["recipe"].get("run") or {}).get("epochs") or 1)


def epoch_of(context: EpisodeContext, system: SystemSpec) -> int:
    """Which epoch of `system` an episode run in `context` is (see `epoch_context`; a control's
    context, `runs.execution.controls.control_context`, adds its mark after the epoch's)."""
    name = context.system.name
    if context.control is not None:
        name = name.removesuffix(control_name("", context.control.kind))
    number = name.removeprefix(f"{system.name}{EPOCH_MARK}")
    return int(number) if number != name and number.isdigit() else 1
