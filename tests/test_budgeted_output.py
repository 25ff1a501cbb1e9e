"""A step's "at most N" is part of the schema its model answers in (maxItems, maxLength), and a
longer list from a server that does not enforce it is cut to the budget, not sent back for repair."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError, create_model

from atelier.agents import clarifier, planner, researcher
from atelier.agents.models.budgeted import ITEM_CHARS, ShortItem, at_most
from atelier.agents.models.gateway import Gateway, _Answered
from atelier.benchmarks.case import Query

QUERY = Query(text="Plan my trip")
BRIEF = planner.ResearchBrief.plain(QUERY)


def test_a_budgeted_list_states_its_bounds_and_keeps_the_first_items():
    Listing = create_model("Listing", items=at_most(ShortItem, 2, min_items=1))
    schema = Listing.model_json_schema()["properties"]["items"]
    assert (schema["minItems"], schema["maxItems"]) == (1, 2)
    assert schema["items"] == {"type": "string", "minLength": 1, "maxLength": ITEM_CHARS}
    assert Listing.model_validate({"items": ["a", "b", "c"]}).items == ["a", "b"]
    with pytest.raises(ValidationError, match="at least 1 item"):
        Listing.model_validate({"items": []})
    with pytest.raises(ValidationError, match=f"at most {ITEM_CHARS} characters"):
        Listing.model_validate({"items": ["x" * (ITEM_CHARS + 1)]})
    Optional = create_model("Optional", items=at_most(str, 3))
    assert Optional().items == [] and "items" not in Optional.model_json_schema().get("required", [])


def _many(n: int) -> list[str]:
    return [f"item {i}" for i in range(n)]


def _topics(n: int) -> list[dict]:
    return [{"title": f"topic {i}", "why_for_user": "it matters", "queries": _many(6)} for i in range(n)]


# (step, the call, the model's over-long answer, where the budget sits in the schema sent, what the step returns)
STEPS = {
    "clarify": (
        lambda g: clarifier.decide_clarification(g, QUERY, "", max_questions=2),
        {"need_clarification": True, "questions": _many(40)},
        [("questions", 2)],
        _many(2),
    ),
    "search queries": (
        lambda g: planner.search_queries(g, QUERY, "", max_queries=3),
        {"queries": _many(9)},
        [("queries", 3)],
        _many(3),
    ),
    "aspects": (
        lambda g: planner.plan_aspects(g, QUERY, "", max_aspects=2),
        {"aspects": _many(9)},
        [("aspects", 2)],
        _many(2),
    ),
    "plan": (
        lambda g: planner.plan_research(g, BRIEF, max_subtopics=2, max_queries=1),
        {"subtopics": _topics(5)},
        [("subtopics", 2), ("$defs.Subtopic.queries", 1)],
        [planner.Subtopic(title=f"topic {i}", why_for_user="it matters", queries=["item 0"]) for i in range(2)],
    ),
    "reflect": (
        lambda g: planner.reflect(g, BRIEF, "notes", max_subtopics=1, max_queries=2),
        {"enough": False, "gaps": _topics(4)},
        [("gaps", 1), ("$defs.Subtopic.queries", 2)],
        [planner.Subtopic(title="topic 0", why_for_user="it matters", queries=_many(2))],
    ),
    "notes": (
        lambda g: researcher.take_notes(g, "topic", "", "a source", "text", max_notes=3),
        {"notes": _many(12)},
        [("notes", 3)],
        _many(3),
    ),
    "coverage": (
        lambda g: researcher.assess_coverage(g, "topic", "", ["a note"], max_queries=2),
        {"covered": False, "follow_up_queries": _many(7)},
        [("follow_up_queries", 2)],
        researcher.Coverage(covered=False, follow_up_queries=_many(2)),
    ),
}


@pytest.mark.parametrize("step", list(STEPS))
async def test_each_step_asks_in_a_schema_holding_its_budget_and_keeps_that_many(monkeypatch, step):
    call, answer, budgets, expected = STEPS[step]
    sent: list[tuple[str, dict]] = []

    async def server_ignoring_the_bounds(self, role, messages, *, mode, schema, kind, may_fall_back=False):
        sent.append((kind, schema.schema))
        return json.dumps(answer), _Answered(None)

    monkeypatch.setattr(Gateway, "_request", server_ignoring_the_bounds)
    assert await call(Gateway()) == expected
    [(kind, schema)] = sent  # cut to the budget: no repair call
    assert kind == "structured"
    for path, budget in budgets:
        if path.startswith("$defs."):
            assert schema["$defs"]["Subtopic"]["properties"][path.split(".")[-1]]["maxItems"] == budget
        else:
            assert schema["properties"][path]["maxItems"] == budget
