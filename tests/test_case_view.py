"""The gold boundary: a system's CaseView has no gold by type, and Case.view() follows each setting."""

from __future__ import annotations

import json

import pytest

from atelier.benchmarks.case import (
    Case,
    CaseView,
    ChatMessage,
    ChatSession,
    Criterion,
    Gold,
    MemorySnippet,
    Persona,
    Query,
    RJPair,
    RubricAspect,
)

SENTINEL = "GOLD-ONLY-c0ffee"


def make_case(setting: str = "context") -> Case:
    return Case(
        id="t:1",
        benchmark="t",
        user_id="u1",
        setting=setting,
        persona=Persona(user_id="u1", attributes={"Basic": {"Occupation": "nurse", "Secret": SENTINEL + "-persona"}}),
        query=Query(text="Which running shoes should I buy?"),
        history=[
            MemorySnippet(id="m1", text="I have flat feet."),
            ChatSession(id="c1", messages=[ChatMessage(role="user", content="Keep answers short.")]),
        ],
        gold=Gold(
            information_need=SENTINEL,
            narrative=SENTINEL,
            rubric_aspects=[RubricAspect(aspect=SENTINEL, reason=SENTINEL, evidence=SENTINEL)],
            information_claims=[SENTINEL],
            rj_pairs=[RJPair(response=SENTINEL, score=5, feedback=SENTINEL)],
            relevant_history_ids=["m1"],
            relevance={"m1": 2},
            answer=SENTINEL,
            adversarial_answer=SENTINEL,
            preference=SENTINEL,
            preference_explanation=SENTINEL,
            criteria=[Criterion(dimension="d", criterion=SENTINEL, weight=1.0)],
            dimension_weights={"d": 1.0},
        ),
    )


def test_caseview_has_no_gold_or_persona_field_by_type():
    fields = set(CaseView.model_fields)
    assert "gold" not in fields and "persona" not in fields
    assert not (set(Gold.model_fields) & fields)
    with pytest.raises(ValueError):  # extra="forbid": gold cannot be smuggled in either
        CaseView.model_validate({**make_case().view().model_dump(), "gold": {"answer": "x"}})


@pytest.mark.parametrize(
    ("setting", "kinds"),
    [
        ("task_only", []),
        ("persona", ["persona"]),
        ("context", ["memory_snippet", "chat_session"]),
        ("persona+context", ["persona", "memory_snippet", "chat_session"]),
        ("history", ["memory_snippet", "chat_session"]),  # any other setting: history as loaded
    ],
)
def test_view_follows_the_setting(setting, kinds):
    view = make_case().view(setting)
    assert isinstance(view, CaseView)
    assert view.setting == setting
    assert [event.kind for event in view.history] == kinds
    assert view.query.text == "Which running shoes should I buy?"


def test_view_defaults_to_the_cases_own_setting():
    assert [e.kind for e in make_case("task_only").view().history] == []
    assert [e.kind for e in make_case("persona").view().history] == ["persona"]


@pytest.mark.parametrize("setting", ["task_only", "context", "history"])
def test_sentinel_gold_string_never_appears_in_a_dumped_view(setting):
    case = make_case()
    assert SENTINEL in case.model_dump_json()  # the sentinel really is in the case
    view = case.view(setting)
    assert SENTINEL not in view.model_dump_json()
    assert SENTINEL not in json.dumps(view.model_dump(), default=str)
    assert SENTINEL not in "\n".join(e.render() for e in view.history)


def test_persona_setting_exposes_the_persona_but_no_gold():
    view = make_case().view("persona")
    dumped = view.model_dump_json()
    assert SENTINEL + "-persona" in dumped  # the persona is what this setting gives the system
    assert dumped.count(SENTINEL) == dumped.count(SENTINEL + "-persona")  # ...and nothing from gold


def test_views_of_real_loader_cases_carry_no_gold():
    from atelier.benchmarks.registry import load_cases

    for case in load_cases("ikat", split="2023_test", limit=20, seed=3):
        assert case.gold.answer
        assert case.gold.answer not in case.view().model_dump_json()
