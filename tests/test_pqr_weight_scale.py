"""PQR's generated weights on any scale: a small model answers 40 for 40% (SmolLM2 did, and every PQR
judgment failed validation); the weights are normalised in code either way, so both scales give the
same criteria."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from atelier.agents.judges.pqr import AXIS_DIMENSIONS, generate_criteria


class _Answers:
    """A gateway double answering each structured request with the given weights' scale."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    async def structured(self, role, messages, schema):
        if schema.__name__.endswith("DimensionWeights"):
            codes = AXIS_DIMENSIONS["P"]
            return schema.model_validate(
                {"analysis": "a", "weights": {c: self.scale * (i + 1) for i, c in enumerate(codes)}}
            )
        return schema.model_validate(
            {
                "analysis": "a",
                "criteria": [
                    {"criterion": "c1", "explanation": "e", "weight": 3 * self.scale},
                    {"criterion": "c2", "explanation": "e", "weight": 1 * self.scale},
                ],
            }
        )


@pytest.mark.parametrize("scale", [0.1, 10.0])
async def test_weights_given_as_percentages_are_normalised_like_fractions(scale):
    criteria = await generate_criteria(SimpleNamespace(gateway=_Answers(scale)), "P", "task", "persona", 2)
    assert criteria["weights"] == pytest.approx({c: (i + 1) / 10 for i, c in enumerate(AXIS_DIMENSIONS["P"])})
    for dimension in criteria["dimensions"].values():
        assert [c["weight"] for c in dimension["criteria"]] == pytest.approx([0.75, 0.25])
    assert criteria["weights_given"][AXIS_DIMENSIONS["P"][-1]] == pytest.approx(4 * scale)  # what the model said, kept
