"""LaMP-QA loader on fixtures in the published schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.registry import load_cases

FIXTURES = Path(__file__).parent / "fixtures" / "lampqa"
JSONL = FIXTURES / "Lifestyle_and_Personal_Development_test.jsonl"


def test_profile_is_history_and_rubric_is_gold():
    cases = load_cases("lampqa", options={"data_file": str(JSONL)})
    assert [c.id for c in cases] == ["lampqa:lq-101", "lampqa:lq-102"]
    case = cases[0]
    assert case.query.text == "How narrow or broad should I look for undergraduate research?"
    assert [e.id for e in case.history] == ["profile:p1", "profile:p2"]
    assert case.history[0].question == "Is it worth learning Lean as a math undergrad?"
    assert case.history[0].narrative.startswith("I have been reading about formal proof assistants")
    assert [a.aspect for a in case.gold.rubric_aspects] == [
        "Cold-emailing professors",
        "Prioritizing actions: broadening search vs. emailing",
    ]
    assert case.gold.narrative.startswith("I'm currently an American sophomore")
    view = case.view()
    assert case.gold.rubric_aspects[0].reason not in view.model_dump_json()
    assert case.gold.narrative not in view.model_dump_json()


def test_json_array_release_format():
    cases = load_cases("lampqa", options={"data_file": str(FIXTURES / "array_format.json")})
    assert [c.id for c in cases] == ["lampqa:7"] and cases[0].history == []


def test_missing_data_file_explains_how_to_supply_it():
    with pytest.raises(ConfigError, match="data_file"):
        load_cases("lampqa")


def test_missing_rubric_field_is_named(tmp_path):
    record = json.loads(JSONL.read_text().splitlines()[1])
    del record["rubric_aspects"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(JSONL.read_text().splitlines()[0] + "\n" + json.dumps(record) + "\n")
    with pytest.raises(DataError) as info:
        load_cases("lampqa", options={"data_file": str(bad)})
    assert (info.value.line, info.value.field) == (2, "rubric_aspects")
