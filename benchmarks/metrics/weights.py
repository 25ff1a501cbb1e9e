"""Weight vectors that the papers require to sum to 1 (PQR dimensions and sub-criteria)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# LLM judges write weights with two or three decimals; 0.333 x 3 must pass, 0.33 x 3 must not.
WEIGHT_SUM_TOLERANCE = 1e-3


def check_weights_sum_to_one(weights: Mapping[str, float], what: str, tolerance: float = WEIGHT_SUM_TOLERANCE) -> None:
    """Raise ValueError naming `what` and every weight unless the weights sum to 1 within `tolerance`."""
    total = math.fsum(weights.values())
    if abs(total - 1.0) > tolerance:
        listing = ", ".join(f"{name}={value:g}" for name, value in weights.items())
        raise ValueError(f"{what} must sum to 1 (±{tolerance:g}) but sum to {total:.6g} ({listing})")


def normalize_weights(weights: Mapping[str, float], what: str) -> dict[str, float]:
    """Weights divided by their sum, so they sum to 1 (an LLM's 0.3/0.3/0.3 becomes thirds).

    The paper's Eq. 1 assumes weights that sum to 1; dividing by the sum is what a weighted mean
    does anyway, so scores equal Eq. 1 whenever the judge got the sum right."""
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError(f"{what} must be finite and >= 0, got {dict(weights)}")
    total = math.fsum(weights.values())
    if total <= 0:
        raise ValueError(f"{what} sum to 0; at least one must be positive")
    return {name: value / total for name, value in weights.items()}
