"""`atelier plan` for a pilot with counterfactual controls (`[run] controls`): the personalization
effect of each system (own − control, per judge) is one more paired comparison to plan for.

Each control's episodes enter the plan as a system of their own, `<system>~<kind>`, so the same
variance decomposition and case count apply to `system − system~kind` as to two systems; their
cost per case comes from the recipe's forecast, which runs and prices control episodes under the
same names (`runs.execution.cost`). What the controls add to a run is said per control.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atelier.benchmarks.controls import CONTROL_MARK, control_name
from atelier.runs.folder.controls import run_control_keys, system_controls
from atelier.runs.folder.layout import RunFolder
from atelier.runs.folder.results import ResultRecord, ResultsFile


def control_records(run_dir: Path, config: dict[str, Any]) -> list[ResultRecord]:
    """The pilot's control episodes, each relabelled as the system `<system>~<kind>` (so a plan can
    treat own − control as a comparison of two systems)."""
    folder = RunFolder(run_dir)
    wanted = set(run_control_keys(config))
    if not wanted or not folder.results.is_file():
        return []
    return [
        r.model_copy(update={"system": control_name(r.system, r.control), "control": None})
        for key, r in ResultsFile(folder.results).load().items()
        if key in wanted and r.control is not None
    ]


def control_pairs(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(system, `<system>~<kind>`) for every control of the pilot's recipe: the effects to plan for."""
    return [
        (system, control_name(system, kind))
        for system, kinds in system_controls(config["recipe"]).items()
        for kind in kinds
    ]


def control_cost_notes(units: dict[str, Any]) -> list[str]:
    """What each control adds per case to a run (episode and one judge repeat), from the plan's unit costs."""
    notes = []
    for name, (episode, repeat) in units.items():
        system, _, kind = name.partition(CONTROL_MARK)
        if not kind:
            continue
        usd = (
            f"${episode.usd[0] + repeat.usd[0]:,.4f} – ${episode.usd[1] + repeat.usd[1]:,.4f}"
            if episode.usd is not None and repeat.usd is not None
            else "unknown dollars"
        )
        calls = f"{episode.calls[0] + repeat.calls[0]:,.1f} – {episode.calls[1] + repeat.calls[1]:,.1f} calls"
        notes.append(f"control {kind} of {system} adds per case and epoch one episode: {calls}, {usd}")
    return notes
