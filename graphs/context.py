"""The runtime context of an episode: settings only (serialisable, editable in LangGraph Studio).

Live objects (gateway, memory backend, judges) are built from these settings by
`graphs.resources.resources_for`, once per distinct context in a process.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.settings import ModelSettings
from tools.config import WebConfig


def _default_models() -> dict[str, ModelSettings]:
    return {"system": ModelSettings(), "judge": ModelSettings(), "user_sim": ModelSettings()}


class SystemSpec(BaseModel):
    """A system under test: pipeline x memory backend x models."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    pipeline: str = "direct"
    memory: dict[str, Any] = Field(default_factory=lambda: {"backend": "none"})
    setting: str | None = Field(default=None, description="Overrides the benchmark setting for this system.")
    models: dict[str, ModelSettings] = Field(default_factory=dict, description="Per-role overrides.")
    pipeline_options: dict[str, Any] = Field(
        default_factory=dict, description="The pipeline's typed options (budgets, gold context, ...); see graphs/*.py."
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
