"""PDR-Bench loader on the real data (../shared/data or $ATELIER_DATA_DIR) and the contexts fixture."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.registry import load_cases

CONTEXTS = Path(__file__).parent / "fixtures" / "pdr_contexts" / "contexts_en.jsonl"


def test_all_250_queries_with_stable_ids_and_task_text():
    cases = load_cases("pdr", split="all")
    assert len(cases) == 250
    assert len({c.id for c in cases}) == 250
    first = cases[0]
    assert first.id == "pdr:en:1" and first.user_id == "User1" and first.task_id == "1"
    assert first.domain == "Education"
    assert first.query.text.startswith("I want to advance my academic qualifications.")
    assert "User Task" not in first.query.text and "userid" not in first.query.text  # not upstream's `query`
    assert collections.Counter(c.domain for c in cases) == {d: 25 for d in collections.Counter(c.domain for c in cases)}
    assert len({c.user_id for c in cases}) == 25


def test_every_case_holds_the_structured_persona():
    for setting in ("task_only", "persona"):
        case = load_cases("pdr", setting=setting, limit=1)[0]
        assert case.persona is not None and case.persona.user_id == case.user_id
        assert "Basic Attributes" in case.persona.attributes
        assert "userid" not in case.persona.attributes


def test_settings_decide_what_the_system_sees():
    case = load_cases("pdr", setting="persona", limit=1)[0]
    assert [e.kind for e in case.view().history] == ["persona"]
    assert "Name: " in case.view().history[0].render()
    assert load_cases("pdr", setting="task_only", limit=1)[0].view().history == []


def test_chinese_queries():
    cases = load_cases("pdr", options={"language": "zh"})
    assert len(cases) == 250 and cases[0].id == "pdr:zh:1" and cases[0].query.language == "zh"
    assert "基础属性" in cases[0].persona.attributes


def test_subset150_has_three_personas_per_task_and_is_fixed():
    cases = load_cases("pdr", split="subset150")
    assert len(cases) == 150
    assert set(collections.Counter(c.task_id for c in cases).values()) == {3}
    assert [c.id for c in cases] == [c.id for c in load_cases("pdr", split="subset150", seed=99)]


def test_limit_is_a_seeded_sample_not_the_first_n():
    a = [c.id for c in load_cases("pdr", limit=10, seed=1)]
    b = [c.id for c in load_cases("pdr", limit=10, seed=2)]
    assert a == [c.id for c in load_cases("pdr", limit=10, seed=1)]
    assert a != b
    assert a != [f"pdr:en:{i}" for i in range(1, 11)]


def test_context_setting_without_contexts_says_how_to_supply_them():
    with pytest.raises(ConfigError, match="contexts_file"):
        load_cases("pdr", setting="context")


def test_context_setting_reads_the_contexts_file():
    cases = load_cases("pdr", setting="persona+context", options={"contexts_file": str(CONTEXTS)})
    assert len(cases) == 250
    view = cases[0].view()
    assert [e.kind for e in view.history] == ["persona", "memory_snippet", "memory_snippet", "chat_session"]
    assert view.history[1].id == "m1" and view.history[1].text.startswith("Weekend plan: ")
    assert view.history[2].id == "memory-1"  # ids are generated when the file has none
    assert cases[0].view("context").history[0].kind == "memory_snippet"


def test_contexts_missing_a_user_is_a_data_error(tmp_path):
    lines = CONTEXTS.read_text().splitlines()
    partial = tmp_path / "contexts.jsonl"
    partial.write_text("\n".join(lines[1:]) + "\n")  # drops User1
    with pytest.raises(DataError, match="User1") as info:
        load_cases("pdr", setting="context", options={"contexts_file": str(partial)})
    assert info.value.file == str(partial)


def test_bad_context_record_names_line_and_field(tmp_path):
    record = json.loads(CONTEXTS.read_text().splitlines()[0])
    record["dialogues"][0]["messages"][0]["role"] = "narrator"
    bad = tmp_path / "contexts.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError) as info:
        load_cases("pdr", setting="context", options={"contexts_file": str(bad)})
    assert info.value.line == 1
    assert info.value.field == "dialogues.0.messages.0.role"
