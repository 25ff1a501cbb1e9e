"""The runtime context of an episode: settings only (serialisable, editable in LangGraph Studio).

Live objects (gateway, memory backend, judges) are built from these settings by
`graphs.resources.resources_for`, once per distinct context in a process.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.settings import ModelSettings
from benchmarks.case import Case, ViewAblation
from benchmarks.errors import ConfigError
from tools.config import WebConfig


def _default_models() -> dict[str, ModelSettings]:
    return {"system": ModelSettings(), "judge": ModelSettings(), "user_sim": ModelSettings()}


class ConversationOptions(BaseModel):
    """A system's conversation with the simulated user (`conversation = { max_turns = 3 }`; graphs/simulate.py)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=3, ge=1, le=20, description="User turns at most, the opening query included.")


class SystemSpec(BaseModel):
    """A system under test: pipeline x memory backend x models."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    pipeline: str = "direct"
    memory: dict[str, Any] = Field(default_factory=lambda: {"backend": "none"})
    setting: str | None = Field(default=None, description="Overrides the benchmark setting for this system.")
    models: dict[str, ModelSettings] = Field(default_factory=dict, description="Per-role overrides.")
    hide: ViewAblation = Field(
        default_factory=ViewAblation, description="Persona facets and history kinds hidden from this system (ablation)."
    )
    conversation: ConversationOptions | None = Field(
        default=None, description="Talk with the simulated user for several turns (graphs/simulate.py)."
    )


class EpisodeContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = "studio"
    run_dir: str | None = Field(default=None, description="Where the ledger and memory stores go.")
    cache_dir: str | None = Field(default=None, description="The LLM response cache; none disables it.")
    models: dict[str, ModelSettings] = Field(default_factory=_default_models)
    system: SystemSpec = Field(default_factory=lambda: SystemSpec(name="direct-full", memory={"backend": "full"}))
    judges: list[dict[str, Any]] = Field(default_factory=lambda: [{"name": "lampqa_aspects"}])
    web: WebConfig = Field(default_factory=WebConfig, description="Search, fetch and the web cache.")

    def role_models(self) -> dict[str, ModelSettings]:
        return {**self.models, **self.system.models}


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
