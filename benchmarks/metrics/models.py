"""Shared pydantic bases for metric inputs and results."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class MetricInput(BaseModel):
    """Input of one metric. Unknown fields are rejected so a misspelt field is an error, not a default."""

    model_config = ConfigDict(extra="forbid")


class MetricResult(BaseModel):
    """Result of one metric; `model_dump(mode="json")` is what `atelier metric` prints."""

    model_config = ConfigDict(frozen=True)
