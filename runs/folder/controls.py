"""Which counterfactual controls a run's recipe asks for, and the keys of their episodes.

`[run] controls = ["swapped", "no_context"]` runs each control beside every system;
`controls = [...]` on a system (`[[systems]]`) overrides that for the system (`[]`: none). Each
control of a system is one more episode per case and epoch, keyed
`<case id>::<system>::control=<kind>` (`runs.folder.results.result_key`), judged by the run's
judges against the case's own user. See benchmarks/controls.py for what each control gives the
system, runs/reading/personalization.py for the effect they measure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.controls import CONTROL_KINDS, control_name
from atelier.graphs.context import SystemSpec
from atelier.runs.folder.epochs import run_epochs
from atelier.runs.folder.results import result_key

NO_CONTEXT_SETTINGS = ("task_only",)  # settings that show a system no user context: a control changes nothing
NO_HISTORY_SETTINGS = ("task_only", "persona")  # settings that show no implicit history to shuffle


def system_controls(recipe: dict[str, Any]) -> dict[str, list[str]]:
    """System name -> the controls run beside it, from a recipe's JSON form (config.json's)."""
    default = list((recipe.get("run") or {}).get("controls") or [])
    out = {}
    for system in recipe.get("systems") or []:
        own = system.get("controls")
        out[system["name"]] = list(own) if own is not None else default
    return out


def control_keys(case_ids: Iterable[str], controls: dict[str, list[str]], epochs: int = 1) -> list[str]:
    """The control episodes of a recipe: every (case, system, control, epoch); epochs outermost."""
    ids = list(case_ids)
    return [
        result_key(case_id, system, epoch, kind)
        for epoch in range(1, epochs + 1)
        for system, kinds in controls.items()
        for kind in kinds
        for case_id in ids
    ]


def run_control_keys(config: dict[str, Any]) -> list[str]:
    """The control episodes of the run a folder's config.json describes (its cases, controls, epochs)."""
    return control_keys(config["cases"], system_controls(config["recipe"]), run_epochs(config))


def check_controls(
    systems: Sequence[SystemSpec], run_controls: Sequence[str], setting: str | None, source: str
) -> None:
    """Refuse controls that cannot measure anything: a kind twice, a control beside a system whose
    setting shows no user context (its control would answer exactly as it does), shuffled_history
    where no implicit history is shown, and a system named as another's control episode runs."""
    problems = []
    names = {s.name for s in systems}
    for i, system in enumerate(systems):
        kinds = list(system.controls if system.controls is not None else run_controls)
        where = f"systems[{i}].controls" if system.controls is not None else "run.controls"
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            problems.append(f"{where}: {', '.join(repeated)} given twice")
        shown = system.setting or setting
        if kinds and shown in NO_CONTEXT_SETTINGS:
            problems.append(
                f"{where}: system {system.name!r} runs with setting {shown!r}, which shows it no user context, so its "
                f"controls would answer exactly as it does; give it `controls = []`"
            )
        elif "shuffled_history" in kinds and shown in NO_HISTORY_SETTINGS:
            problems.append(
                f"{where}: shuffled_history changes the implicit history, which setting {shown!r} does not show "
                f"system {system.name!r}"
            )
        clashes = [control_name(system.name, k) for k in CONTROL_KINDS if control_name(system.name, k) in names]
        if kinds and clashes:
            problems.append(
                f"{where}: another system is named {clashes[0]!r}, the name {system.name!r}'s control runs under"
            )
    if problems:
        raise ConfigError(f"invalid recipe: {source}: " + "; ".join(problems))
