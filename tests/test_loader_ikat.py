"""TREC iKAT loader: real 2023/2024 topics, the relevance files, and a 2025-format fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.registry import load_cases

TOPICS_2025 = Path(__file__).parent / "fixtures" / "ikat2025" / "2025_test_topics.json"


@pytest.mark.parametrize(
    ("split", "turns", "topics"), [("2023_train", 95, 11), ("2023_test", 332, 25), ("2024_test", 218, 17)]
)
def test_one_case_per_turn_and_one_user_per_topic(split, turns, topics):
    cases = load_cases("ikat", split=split)
    assert len(cases) == turns
    assert len({c.user_id for c in cases}) == topics
    assert len({c.id for c in cases}) == turns


def test_turn_fields_and_provenance_gold():
    cases = {c.id: c for c in load_cases("ikat", split="2023_test")}
    case = cases["ikat:2023_test:9-1:1"]
    assert case.query.text == "Can you help me find a diet for myself?"
    assert case.query.resolved.startswith("Can you help me find a diet for myself considering that I'm vegetarian")
    assert case.query.previous_turns == []
    assert all(e.kind == "ptkb" for e in case.history) and case.history[0].id == "ptkb:1"
    assert case.gold.relevant_history_ids and set(case.gold.relevant_history_ids) <= case.event_ids()
    third = cases["ikat:2023_test:9-1:3"]
    assert [t.utterance for t in third.query.previous_turns] == [
        cases["ikat:2023_test:9-1:1"].query.text,
        cases["ikat:2023_test:9-1:2"].query.text,
    ]
    assert third.query.previous_turns[0].response == case.gold.answer


def test_nist_qrels_give_graded_relevance_for_98_turns():
    cases = load_cases("ikat", split="2023_test", options={"qrels": "nist"})
    judged = [c for c in cases if c.gold.relevance]
    assert len(judged) == 98
    case = next(c for c in cases if c.id == "ikat:2023_test:9-1:3")
    assert case.gold.relevance["ptkb:2"] == 1 and case.gold.relevance["ptkb:1"] == 0
    assert case.gold.relevant_history_ids == ["ptkb:2", "ptkb:4", "ptkb:5", "ptkb:6", "ptkb:7"]
    org = load_cases("ikat", split="2023_test", options={"qrels": "org"})
    assert sum(1 for c in org if c.gold.relevance) == 112


def test_qrels_only_for_the_split_they_judge():
    with pytest.raises(ConfigError, match="2023_test"):
        load_cases("ikat", split="2024_test", options={"qrels": "nist"})


def test_2025_format_from_a_topics_file():
    cases = load_cases("ikat", split="2025_test", options={"topics_file": str(TOPICS_2025)})
    assert [c.id for c in cases][:3] == ["ikat:2025_test:1-1:1", "ikat:2025_test:1-1:2", "ikat:2025_test:1-1:3"]
    third = cases[2]
    assert third.query.text == "How about the fruits I mentioned before?"
    assert third.query.resolved == "How are the fruits I mentioned before for acid reflux?"
    assert third.gold.relevant_history_ids == ["ptkb:3", "ptkb:4"]  # statement texts mapped to their ids
    assert third.history[2].text == "I enjoy apple, kiwi, and watermelon."
    assert len(third.query.previous_turns) == 2


def test_2025_split_without_a_file_explains_itself():
    with pytest.raises(ConfigError, match="topics_file"):
        load_cases("ikat", split="2025_test")


def test_unknown_relevant_statement_is_a_data_error(tmp_path):
    topics = json.loads(TOPICS_2025.read_text())
    topics[0]["responses"][2]["relevant_ptkbs"] = ["I never said this."]
    bad = tmp_path / "topics.json"
    bad.write_text(json.dumps(topics))
    with pytest.raises(DataError, match="I never said this") as info:
        load_cases("ikat", split="2025_test", options={"topics_file": str(bad)})
    assert info.value.field == "[0].responses.turn_id=3.relevant_ptkbs"


def test_wrong_type_names_record_index_and_field(tmp_path):
    topics = json.loads(TOPICS_2025.read_text())
    topics[1]["responses"][0]["turn_id"] = "one"
    bad = tmp_path / "topics.json"
    bad.write_text(json.dumps(topics))
    with pytest.raises(DataError) as info:
        load_cases("ikat", split="2025_test", options={"topics_file": str(bad)})
    assert info.value.field == "[1].responses.0.turn_id"


def test_qrels_lines_are_counted_at_newlines_only(tmp_path):
    """A form feed or U+0085 inside a line is no line end: the bad line is named as an editor counts."""
    from atelier.benchmarks.loaders.ikat import read_qrels

    qrels = tmp_path / "qrels"
    qrels.write_text("9-1_1 0 ptkb1 2\x0c\r\n9-1_2 0 ptkb2\x85 1\n9-1_3 0 ptkb3 x\n", encoding="utf-8")
    with pytest.raises(DataError, match="relevance grade 'x'") as info:
        read_qrels(qrels)
    assert info.value.line == 3
    qrels.write_text("9-1_1 0 ptkb1 2\x0c\r\n9-1_2 0 ptkb2\x85 1\n", encoding="utf-8")
    assert read_qrels(qrels) == {("9-1", 1): {"ptkb1": 2}, ("9-1", 2): {"ptkb2": 1}}
