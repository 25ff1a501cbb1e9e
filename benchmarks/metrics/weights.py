"""Validation of weight vectors that the papers require to sum to 1 (PQR dimensions and sub-criteria)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# LLM judges write weights with two or three decimals; 0.333 x 3 must pass, 0.33 x 3 must not.
WEIGHT_SUM_TOLERANCE = 1e-3


def check_weights_sum_to_one(
    weights: Mapping[str, float], what: str, tolerance: float = WEIGHT_SUM_TOLERANCE
) -> None:
    """Raise ValueError naming `what` and every weight unless the weights sum to 1 within `tolerance`."""
    total = math.fsum(weights.values())
    if abs(total - 1.0) > tolerance:
        listing = ", ".join(f"{name}={value:g}" for name, value in weights.items())
        raise ValueError(f"{what} must sum to 1 (±{tolerance:g}) but sum to {total:.6g} ({listing})")
