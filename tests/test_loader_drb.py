"""DeepResearch Bench loader: tasks with weighted criteria."""

from __future__ import annotations

import math

from atelier.benchmarks.registry import load_cases


def test_languages():
    assert len(load_cases("drb")) == 50
    assert len(load_cases("drb", options={"language": "zh"})) == 50
    assert len(load_cases("drb", options={"language": "all"})) == 100
    assert {c.query.language for c in load_cases("drb")} == {"en"}


def test_criteria_and_weights():
    cases = {c.id: c for c in load_cases("drb", options={"language": "all"})}
    first = cases["drb:1"]
    assert first.query.text.startswith("收集整理目前中国9阶层实际收入和财务状况")
    assert first.domain == "Finance & Business"
    assert first.gold.dimension_weights == {
        "readability": 0.14,
        "insight": 0.36,
        "comprehensiveness": 0.3,
        "instruction_following": 0.2,
    }
    assert first.gold.criteria[0].dimension == "comprehensiveness"
    assert first.gold.criteria[0].criterion == "阶层划分标准的明确性与覆盖度"
    assert first.gold.criteria[0].weight == 0.15
    for case in cases.values():
        assert math.isclose(sum(case.gold.dimension_weights.values()), 1.0, abs_tol=1e-6)
        dims = {c.dimension for c in case.gold.criteria}
        assert dims == set(case.gold.dimension_weights)
        for dim in dims:
            assert math.isclose(sum(c.weight for c in case.gold.criteria if c.dimension == dim), 1.0, abs_tol=1e-3)
        view = case.view().model_dump_json()
        assert case.view().history == [] and case.gold.criteria[0].explanation not in view
