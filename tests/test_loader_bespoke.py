"""BESPOKE loader on fixtures in the release's table layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.registry import load_cases

FIXTURES = Path(__file__).parent / "fixtures" / "bespoke"


def test_queries_history_and_gold():
    cases = load_cases("bespoke", options={"data_dir": str(FIXTURES)})
    assert [c.id for c in cases] == ["bespoke:u01-q1", "bespoke:u01-q2", "bespoke:u02-q1"]
    shoes = cases[0]
    assert shoes.user_id == "u01"
    assert [e.id for e in shoes.history] == ["chat:c1", "search:s1"]
    assert shoes.history[0].title == "Flat feet and running" and shoes.history[0].messages[0].role == "user"
    assert shoes.history[1].queries[0].clicked[0].title == "12-week half marathon plan for beginners"
    assert shoes.history[1].queries[1].clicked == []
    assert shoes.gold.information_need.startswith("Shoes for a flat-footed beginner")
    assert shoes.gold.information_claims == [
        "Stability shoes suit flat feet.",
        "Budget under 120 USD",
        "Asphalt favours cushioned road shoes",
    ]
    assert [(p.score, p.feedback) for p in shoes.gold.rj_pairs] == [
        (1.0, "Too generic: ignores my flat feet and budget."),
        (5.0, "Exactly my situation."),
    ]
    assert len(shoes.gold.rubric_aspects) == 1
    assert cases[1].gold.rj_pairs == [] and cases[1].history == shoes.history
    assert [e.id for e in cases[2].history] == ["chat:c2"]
    assert shoes.gold.information_need not in shoes.view().model_dump_json()


def test_missing_data_dir_explains_how_to_supply_it(tmp_path):
    with pytest.raises(ConfigError, match="data_dir"):
        load_cases("bespoke")
    with pytest.raises(ConfigError, match="query_table"):
        load_cases("bespoke", options={"data_dir": str(tmp_path)})


def test_bad_json_inside_a_value_names_line_and_field(tmp_path):
    data = tmp_path / "bespoke"
    shutil.copytree(FIXTURES, data)
    path = data / "evaluation_shot" / "evaluation_shot.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["evaluation_shot_value"] = json.dumps({"score": 3, "feedback": "no response field"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError) as info:
        load_cases("bespoke", options={"data_dir": str(data)})
    assert (info.value.line, info.value.field) == (2, "evaluation_shot_value.response")


def test_row_for_an_unknown_query_is_a_data_error(tmp_path):
    data = tmp_path / "bespoke"
    shutil.copytree(FIXTURES, data)
    path = data / "personalized_rubric" / "personalized_rubric.jsonl"
    path.write_text(
        path.read_text()
        + json.dumps({"user": "u09", "query-id": "u09-q7", "id": "r9", "personalized_rubric_value": "x"})
        + "\n"
    )
    with pytest.raises(DataError, match="u09-q7"):
        load_cases("bespoke", options={"data_dir": str(data)})
