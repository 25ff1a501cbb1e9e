"""A run's counterfactual control episodes (`[run] controls`, a system's `controls`).

Each control of a system is one more episode per case and epoch, run exactly as the system's own
episodes are — checkpointed, cached, ledgered, budgeted, resumable by its key — under a context of
its own (`control_context`): the system named `<system>~<kind>` (so its memory store and work
folders are its own, and a user's real state never mixes with a control's) and `control` set, which
makes the episode's system and memory see the control's view (`graphs.inputs.case_view`) while its
judges read the case's own user and gold. Whether the benchmark can have the controls at all (a
swapped control needs two users whose contexts differ) is checked before any episode starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.controls import NoDerangement, control_name
from atelier.graphs.context import ControlSpec, EpisodeContext, SystemSpec
from atelier.graphs.inputs import control_plan
from atelier.runs.folder.controls import control_keys, system_controls
from atelier.runs.folder.epochs import epoch_context
from atelier.runs.folder.recipe import Recipe
from atelier.runs.folder.results import result_key


def control_context(context: EpisodeContext, kind: str, seed: int) -> EpisodeContext:
    """The context of control `kind` of the system (and epoch) `context` runs."""
    system = context.system.model_copy(update={"name": control_name(context.system.name, kind)})
    control = ControlSpec.model_validate({"kind": kind, "seed": seed})
    return context.model_copy(update={"system": system, "control": control})


def control_of(context: EpisodeContext) -> str | None:
    """The control an episode's context runs (None: the system's own episode)."""
    return context.control.kind if context.control is not None else None


@dataclass
class ControlEpisodes:
    """The control episodes of a recipe on its cases, with the context each runs under."""

    kinds: dict[str, list[str]]  # system -> its controls
    case_ids: list[str]
    epochs: int
    contexts: dict[tuple[str, int, str], EpisodeContext] = field(default_factory=dict)

    @classmethod
    def plan(
        cls, recipe: Recipe, cases: list[Case], context_for: Callable[[SystemSpec], EpisodeContext]
    ) -> ControlEpisodes:
        """The recipe's controls on `cases`; a ConfigError when the benchmark cannot have one."""
        kinds = {name: k for name, k in system_controls(recipe.model_dump(mode="json")).items() if k}
        out = cls(kinds, [c.id for c in cases], recipe.run.epochs)
        for system in recipe.systems:
            base = context_for(system)
            for kind in kinds.get(system.name, []):
                for epoch in range(1, recipe.run.epochs + 1):
                    out.contexts[(system.name, epoch, kind)] = control_context(
                        epoch_context(base, epoch, recipe.run.reuse_judgments), kind, recipe.seed
                    )
        for kind in sorted({kind for k in kinds.values() for kind in k}):
            context = next(c for (_, _, k), c in out.contexts.items() if k == kind)
            try:  # drawn over the benchmark's every case (a run's cases are of one benchmark)
                control_plan(cases[0], context).check(kind) if cases else None
            except NoDerangement as exc:
                raise ConfigError(
                    f"[run] controls: {exc} (benchmark {recipe.benchmark.name!r}); leave {kind} out"
                ) from None
        return out

    def described(self, cases: list[Case]) -> dict[str, object]:
        """config.json's `controls`: each system's, and who answered for whom in the swapped control."""
        if not self.kinds:
            return {}
        out: dict[str, object] = {"systems": self.kinds}
        swapped = next((c for (_, _, kind), c in self.contexts.items() if kind == "swapped"), None)
        if swapped is not None and cases:
            donors = control_plan(cases[0], swapped).donors
            out["swapped_donors"] = {c.user_id: donors[c.user_id] for c in cases if c.user_id in donors}
        return {"controls": out}

    @property
    def keys(self) -> list[str]:
        return control_keys(self.case_ids, self.kinds, self.epochs)

    def context(self, system: str, epoch: int, kind: str) -> EpisodeContext:
        return self.contexts[(system, epoch, kind)]

    def todo(
        self, cases: list[Case], systems: list[SystemSpec], done: set[str]
    ) -> list[tuple[Case, SystemSpec, int, str | None]]:
        """The control episodes not yet done, epochs outermost (as the system's own episodes)."""
        return [
            (case, system, epoch, kind)
            for epoch in range(1, self.epochs + 1)
            for system in systems
            for kind in self.kinds.get(system.name, [])
            for case in cases
            if result_key(case.id, system.name, epoch, kind) not in done
        ]
