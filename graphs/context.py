"""The runtime context of an episode: settings only (serialisable, editable in LangGraph Studio).

Live objects (gateway, memory backend, judges) are built from these settings by
`graphs.resources.resources_for`, once per distinct context in a process.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atelier.agents.models.settings import ModelSettings, settings_for_role
from atelier.benchmarks.case import Case, ViewAblation
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.names import checked_folder_name
from atelier.benchmarks.controls import ControlKind
from atelier.tools.config import WebConfig


def _default_models() -> dict[str, ModelSettings]:
    return {"system": ModelSettings(), "judge": ModelSettings(), "user_sim": ModelSettings()}


class ConversationOptions(BaseModel):
    """A system's conversation with the simulated user (`conversation = { max_turns = 3 }`; graphs/simulate.py)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=3, ge=1, le=20, description="User turns at most, the opening query included.")


class SystemSpec(BaseModel):
    """A system under test: pipeline x memory backend x models."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Names the system in results, and its folders in the run folder.")
    pipeline: str = "direct"
    memory: dict[str, Any] = Field(default_factory=lambda: {"backend": "none"})
    setting: str | None = Field(default=None, description="Overrides the benchmark setting for this system.")
    models: dict[str, ModelSettings] = Field(default_factory=dict, description="Per-role overrides.")
    pipeline_options: dict[str, Any] = Field(
        default_factory=dict, description="The pipeline's typed options (budgets, gold context, ...); see graphs/*.py."
    )
    hide: ViewAblation = Field(
        default_factory=ViewAblation, description="Persona facets and history kinds hidden from this system (ablation)."
    )
    conversation: ConversationOptions | None = Field(
        default=None, description="Talk with the simulated user for several turns (graphs/simulate.py)."
    )
    controls: list[ControlKind] | None = Field(
        default=None,
        description="Counterfactual controls run beside this system (swapped, no_context, shuffled_history; "
        "benchmarks/controls.py); unset: the run's `[run] controls`, `[]`: none.",
    )

    @field_validator("name")
    @classmethod
    def _a_name_not_a_path(cls, name: str) -> str:
        """The name becomes a folder of the run folder (memory stores, agents' work): it may not lead
        out of it, or be the folder itself, or look like another name."""
        return checked_folder_name(name, "a system's name")


class BenchmarkRef(BaseModel):
    """The benchmark a run loaded: other cases are drawn from it (random profile, gold noise)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    split: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class ControlSpec(BaseModel):
    """The counterfactual control an episode runs as (benchmarks/controls.py), with the seed its
    derangement is drawn with (the run's, the same in every epoch)."""

    model_config = ConfigDict(extra="forbid")

    kind: ControlKind
    seed: int = 0


class EpisodeContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = "studio"
    run_dir: str | None = Field(default=None, description="Where the ledger and memory stores go.")
    cache_dir: str | None = Field(
        default=None, description="The LLM response cache: a directory or a redis:// URL; none disables it."
    )
    models: dict[str, ModelSettings] = Field(default_factory=_default_models)
    system: SystemSpec = Field(default_factory=lambda: SystemSpec(name="direct-full", memory={"backend": "full"}))
    judges: list[dict[str, Any]] = Field(default_factory=lambda: [{"name": "lampqa_aspects"}])
    web: WebConfig = Field(default_factory=WebConfig, description="Search, fetch and the web cache.")
    seed: int = Field(default=0, description="The run's seed (random profile, gold noise), unless a system has one.")
    benchmark: BenchmarkRef | None = Field(
        default=None, description="Where other cases come from; unset: the case's benchmark with its defaults."
    )
    clarify_answerer: Literal["person", "simulated_user", "none"] = Field(
        default="person",
        description="Who answers a system's clarifying questions: 'person' (the graph interrupts; in Studio you "
        "answer), 'simulated_user' (the graph interrupts; the run answers with the simulated user, "
        "graphs/simulate.py) or 'none' (the step is skipped and recorded as skipped).",
    )
    control: ControlSpec | None = Field(
        default=None,
        description="Run the episode as a counterfactual control: the system answers with another user's context "
        "(swapped), none (no_context) or its own events holding other users' texts (shuffled_history); judges "
        "still read the case's own user and gold (graphs/controls.py).",
    )

    def role_models(self) -> dict[str, ModelSettings]:
        """Settings per role: the run's, the system's overrides, then the pipeline's output budgets."""
        from atelier.graphs.pipelines import pipeline_options

        roles = {**self.models, **self.system.models}
        budgets = pipeline_options(self.system.pipeline, self.system.pipeline_options).output_tokens()
        for role, tokens in budgets.items():
            settings = settings_for_role(roles, role)
            if settings.max_tokens is None or settings.max_tokens > tokens:
                roles[role] = settings.model_copy(update={"max_tokens": tokens})
        return roles


def check_hidden_facets(cases: list[Case], systems: list[SystemSpec]) -> None:
    """Refuse a `hide.facets` pattern that matches nothing in the loaded cases (a typo would hide nothing)."""
    for i, system in enumerate(systems):
        unmatched = system.hide.unmatched_facets(cases)
        if unmatched:
            raise ConfigError(
                f"systems[{i}].hide.facets: {unmatched[0]!r} matches no persona facet or history trait of the "
                f"loaded cases (a pattern is a facet path prefix such as 'Preferences and Interests > Diet', or one "
                f"path component such as 'Diet')"
            )
