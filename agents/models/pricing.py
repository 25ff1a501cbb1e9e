"""What a model's tokens cost: the role's own `input_cost_per_token` / `output_cost_per_token`,
else litellm's cost map (its offline copy); `scripted` and local models cost nothing; a model with
no known price has none (`Price.known` is False), never $0.

The cost forecast (`atelier recipe cost`) prices the calls it expects with it, and the report prices
the calls the response cache answered as they would have cost from the provider (`uncached`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.settings import ModelSettings


class Price(BaseModel):
    input_per_token: float | None
    output_per_token: float | None
    source: str = Field(description="recipe | litellm | free (scripted, local) | unknown")

    @property
    def known(self) -> bool:
        return self.input_per_token is not None and self.output_per_token is not None

    def of(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The price of these tokens; None when unknown."""
        if self.input_per_token is None or self.output_per_token is None:
            return None
        return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token


def price_of(settings: ModelSettings) -> Price:
    if settings.is_scripted or settings.is_local:
        return Price(input_per_token=0.0, output_per_token=0.0, source="free")
    if settings.input_cost_per_token is not None and settings.output_cost_per_token is not None:
        return Price(
            input_per_token=settings.input_cost_per_token,
            output_per_token=settings.output_cost_per_token,
            source="recipe",
        )
    info = model_info(settings.model)
    if info.get("input_cost_per_token") is not None and info.get("output_cost_per_token") is not None:
        return Price(
            input_per_token=info["input_cost_per_token"],
            output_per_token=info["output_cost_per_token"],
            source="litellm",
        )
    return Price(input_per_token=None, output_per_token=None, source="unknown")


def model_info(model: str) -> dict[str, Any]:
    """litellm's map entry for `model` ({} when it has none)."""
    from atelier.agents.models.litellm_setup import configured_litellm

    try:
        return dict(configured_litellm().get_model_info(model))
    except Exception:  # noqa: BLE001 - litellm raises its own error types for a model it has not mapped
        return {}
