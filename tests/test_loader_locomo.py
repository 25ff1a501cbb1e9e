"""LoCoMo loader on the real locomo10.json."""

from __future__ import annotations

import collections

import pytest

from atelier.benchmarks.loaders.locomo import NOT_MENTIONED, normalise_evidence
from atelier.benchmarks.registry import load_cases


@pytest.fixture(scope="module")
def cases():
    return load_cases("locomo")


def test_all_qa_items_with_categories(cases):
    assert len(cases) == 1986
    assert collections.Counter(c.meta["category"] for c in cases) == {4: 841, 5: 446, 2: 321, 1: 282, 3: 96}
    assert len({c.user_id for c in cases}) == 10


def test_sessions_become_dialogue_turns(cases):
    case = cases[0]
    assert case.id == "locomo:conv-26:0" and case.user_id == "conv-26"
    first = case.history[0]
    assert (first.id, first.speaker, first.session, first.timestamp) == (
        "D1:1",
        "Caroline",
        "session_1",
        "1:56 pm on 8 May, 2023",
    )
    assert all(e.kind == "dialogue_turn" for e in case.history)
    assert any("[shares an image:" in e.text for e in case.history)
    assert case.query.text == "When did Caroline go to the LGBTQ support group?"
    assert case.gold.answer == "7 May 2023" and case.gold.relevant_history_ids == ["D1:3"]


def test_adversarial_items_use_their_own_answer_field(cases):
    adversarial = [c for c in cases if c.meta["category"] == 5]
    assert len(adversarial) == 446
    assert all(c.gold.answer == NOT_MENTIONED and c.gold.adversarial_answer for c in adversarial)
    assert all(c.gold.adversarial_answer is None for c in cases if c.meta["category"] != 5)
    assert (
        next(c for c in adversarial if c.id == "locomo:conv-26:152").gold.adversarial_answer == "self-care is important"
    )


def test_evidence_ids_are_normalised_and_resolved(cases):
    assert normalise_evidence(["D:11:26"]) == ["D11:26"]
    assert normalise_evidence(["D30:05"]) == ["D30:5"]
    assert normalise_evidence(["D8:6; D9:17", "D1:2 D1:3"]) == ["D8:6", "D9:17", "D1:2", "D1:3"]
    for case in cases:
        assert set(case.gold.relevant_history_ids) <= case.event_ids()
    assert sum(c.meta["evidence_unresolved"] for c in cases) == 3


def test_category_option_and_views(cases):
    only = load_cases("locomo", options={"categories": [1, 3]})
    assert len(only) == 282 + 96
    assert cases[0].view("task_only").history == []
    assert len(cases[0].view().history) == len(cases[0].history)
