"""PrefEval loader: the three preference forms on the real files."""

from __future__ import annotations

import pytest

from atelier.benchmarks.loaders.prefeval import TOPICS
from atelier.benchmarks.registry import load_cases


@pytest.mark.parametrize(
    ("setting", "kind"),
    [("explicit", "preference"), ("implicit_choice", "chat_session"), ("implicit_persona", "chat_session")],
)
def test_each_form_has_1000_items(setting, kind):
    cases = load_cases("prefeval", setting=setting)
    assert len(cases) == 1000
    assert {c.history[0].kind for c in cases} == {kind}
    assert all(c.gold.relevant_history_ids == ["preference"] and c.gold.preference for c in cases)
    assert len({c.user_id for c in cases}) == 1000


def test_explicit_item_fields():
    case = load_cases("prefeval", split="travel_hotel", setting="explicit")[0]
    assert case.id == "prefeval:explicit:travel_hotel:0"
    assert case.history[0].text == "I avoid hotels with a bustling nightlife atmosphere."
    assert case.query.text == "Can you suggest some great hotels for my upcoming trip to Las Vegas?"
    assert case.gold.preference_explanation.startswith("Las Vegas is known for its vibrant nightlife")


def test_choice_conversation_reveals_preference_only_by_choice():
    case = load_cases("prefeval", split="travel_hotel", setting="implicit_choice")[0]
    messages = case.history[0].messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0].content == "What are some good hotels to stay at in Las Vegas?"
    assert "Westin" in messages[2].content
    assert case.gold.preference == "I absolutely avoid hotels with a bustling nightlife atmosphere."
    assert case.gold.preference not in case.view().model_dump_json()


def test_persona_driven_conversation_and_persona():
    case = load_cases("prefeval", split="travel_hotel", setting="implicit_persona")[0]
    assert len(case.history[0].messages) == 12  # six user/assistant turns, in order
    assert case.history[0].messages[0].content.startswith("Hi there! I'm planning a community outreach event")
    assert case.persona.attributes == {"persona": "A police officer specializing in community outreach programs"}


def test_topic_splits_and_option():
    assert len(TOPICS) == 20
    assert len(load_cases("prefeval", split="travel_hotel")) == 54
    assert len(load_cases("prefeval", options={"topics": ["travel_hotel", "shop_home"]})) == 54 + 56
