"""A recipe's models, probed: what `atelier model check RECIPE` prints and a run's preflight asks.

Roles are the recipe's (`system`, `judge`, `user_sim`, ...) plus each system's own overrides,
named `<system>:<role>`. The probe itself is `agents.models.model_probe.probe_models`.
"""

from __future__ import annotations

from pathlib import Path

from atelier.agents.models.model_probe import ModelProbe, probe_models
from atelier.agents.models.settings import ModelSettings
from atelier.agents.models.structured_output import ModeMemory
from atelier.runs.folder.recipe import Recipe


def recipe_models(recipe: Recipe) -> dict[str, ModelSettings]:
    models = dict(recipe.role_models())
    for system in recipe.systems:
        for role, settings in system.models.items():
            models[f"{system.name}:{role}"] = settings
    return models


async def probe_recipe(recipe: Recipe, run_dir: str | Path | None = None) -> list[ModelProbe]:
    """Probe every model the recipe names; with `run_dir`, the structured modes found are kept in
    that run folder, so the run that follows asks in them straight away."""
    return await probe_models(recipe_models(recipe), modes=ModeMemory.in_folder(run_dir))
