"""The simulated user's answers, turns and feedback: held to the protocol in code, on the scripted
model, a recording test double (for exact model answers) and litellm's real HTTP path (the stub)."""

from __future__ import annotations

import json

from atelier.agents.clarify import ClarifyRequest
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim import DONT_KNOW, STOP_TOKEN, answer_clarification, next_user_turn, rate_response
from atelier.agents.user_sim.feedback import UserFeedback
from atelier.benchmarks.case import ConversationTurn
from atelier.benchmarks.registry import load_cases
from tests.conftest import GOLD_SENTINEL
from tests.openai_stub import OpenAIStub

QUESTIONS = ["What is your weekly training volume?", "Any foods you avoid?", "Which city do you live in?"]


def tiny_case():
    return load_cases("tiny", limit=1)[0]


class ScriptedAnswers:
    """A test double for the gateway: returns fixed structured answers and records the requests."""

    def __init__(self, data: dict) -> None:
        self.data = data
        self.requests: list[tuple[str, list[dict]]] = []

    async def structured(self, role, messages, schema):
        self.requests.append((role, messages))
        return schema.model_validate(self.data)


async def test_each_question_gets_one_answer_and_unknowns_become_i_dont_know():
    gateway = ScriptedAnswers(
        {
            "answers": [
                {"question": 2, "known": True, "answer": "Soy, I'm allergic. ###STOP###"},
                {"question": 1, "known": False, "answer": "About 60 km a week"},  # marked unknown: not passed on
                {"question": 2, "known": True, "answer": "a second answer to question 2 is ignored"},
                {"question": 9, "known": True, "answer": "no such question"},
            ]
        }
    )
    reply = await answer_clarification(gateway, tiny_case(), ClarifyRequest(questions=QUESTIONS))
    assert reply.answers.answers == [DONT_KNOW, "Soy, I'm allergic.", DONT_KNOW]
    assert reply.unknown == 2 and reply.redacted == 0
    assert reply.transcript().endswith(STOP_TOKEN)
    [(role, messages)] = gateway.requests
    assert role == "user_sim"
    prompt = messages[1]["content"]
    assert "tester u1" in prompt and f"{GOLD_SENTINEL} need 0" in prompt  # grounded on persona and hidden need
    assert all(f"{i}. {q}" in prompt for i, q in enumerate(QUESTIONS, 1))


async def test_an_answer_copying_gold_is_scrubbed_before_the_system_gets_it():
    gateway = ScriptedAnswers(
        {
            "answers": [
                {"question": 1, "known": True, "answer": f"Honestly: {GOLD_SENTINEL} need 0."},
                {"question": 2, "known": True, "answer": f"{GOLD_SENTINEL}"},
            ]
        }
    )
    reply = await answer_clarification(gateway, tiny_case(), ClarifyRequest(questions=QUESTIONS[:2]))
    assert not any(GOLD_SENTINEL in a for a in reply.answers.answers)
    # the sentinel twice, and the gold-only figure "0" of "need 0"
    assert reply.answers.answers == ["Honestly: … need ….", DONT_KNOW] and reply.redacted == 3


async def test_scripted_model_answers_through_the_gateway_with_the_user_sim_role():
    gateway = Gateway()
    reply = await answer_clarification(gateway, tiny_case(), ClarifyRequest(questions=QUESTIONS))
    assert len(reply.answers.answers) == 3 and all(a.strip() for a in reply.answers.answers)
    assert not any(GOLD_SENTINEL in a for a in reply.answers.answers)
    assert [e.role for e in gateway.ledger.entries] == ["user_sim"] and gateway.ledger.entries[0].kind == "structured"


async def test_a_turn_stops_on_the_stop_token_or_when_satisfied_and_is_scrubbed_otherwise():
    turns = [ConversationTurn(utterance="Plan my meals for a training week.", response="Eat pasta.")]
    case = tiny_case()
    for data in (
        {"message": STOP_TOKEN, "satisfied": False},
        {"message": "thanks!", "satisfied": True},
        {"message": f"ok {STOP_TOKEN}", "satisfied": False},
    ):
        assert (await next_user_turn(ScriptedAnswers(data), case, turns)).ended == "satisfied"
    for data in (
        {"message": STOP_TOKEN, "satisfied": False, "gave_up": True},
        {"message": "this is useless", "satisfied": True, "gave_up": True},
    ):  # giving up outranks it
        assert (await next_user_turn(ScriptedAnswers(data), case, turns)).ended == "gave_up"
    only_gold = ScriptedAnswers({"message": GOLD_SENTINEL, "satisfied": False})
    assert (await next_user_turn(only_gold, case, turns)).ended == "nothing_left_to_say"
    gateway = ScriptedAnswers({"message": f"No pasta, I'm vegetarian — {GOLD_SENTINEL}", "satisfied": False})
    turn = await next_user_turn(gateway, case, turns)
    assert not turn.stop and turn.text.startswith("No pasta, I'm vegetarian") and GOLD_SENTINEL not in turn.text
    assert turn.redacted == 1
    prompt = gateway.requests[0][1][1]["content"]
    assert "user: Plan my meals for a training week." in prompt and "assistant: Eat pasta." in prompt


async def test_feedback_on_the_four_criteria_becomes_rj_pairs():
    judgment = lambda s: {"score": s, "feedback": f"scored {s}"}
    gateway = ScriptedAnswers(
        {
            "need_alignment": judgment(4),
            "content_depth": judgment(2),
            "tone": judgment(5),
            "explanation_style": judgment(3),
        }
    )
    feedback = await rate_response(gateway, tiny_case(), "Eat pasta every day.")
    pairs = feedback.rj_pairs("Eat pasta every day.")
    assert [(p.criterion, p.score, p.feedback) for p in pairs] == [
        ("need_alignment", 4, "scored 4"),
        ("content_depth", 2, "scored 2"),
        ("tone", 5, "scored 5"),
        ("explanation_style", 3, "scored 3"),
    ]
    assert all(p.response == "Eat pasta every day." for p in pairs)
    prompt = gateway.requests[0][1][1]["content"]
    assert "<data>\nEat pasta every day.\n</data>" in prompt and "explanation_style:" in prompt


async def test_the_simulated_user_works_over_litellms_http_path():
    with OpenAIStub() as stub:
        settings = ModelSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", max_retries=0)
        gateway = Gateway({"user_sim": settings})
        case = tiny_case()
        feedback = await rate_response(gateway, case, "Eat pasta every day.")
        reply = await answer_clarification(gateway, case, ClarifyRequest(questions=QUESTIONS))
        turn = await next_user_turn(gateway, case, [ConversationTurn(utterance="hi", response="hello")])
    assert isinstance(feedback, UserFeedback) and all(1 <= j.score <= 5 for j in feedback.judgments().values())
    assert len(reply.answers.answers) == 3
    assert turn.stop or turn.text
    assert len(stub.requests) == 3
    bodies = [json.dumps(r["body"]["messages"]) for r in stub.requests]
    assert all(GOLD_SENTINEL in b for b in bodies)  # the simulator sees the need; the system never will
    assert {e.model for e in gateway.ledger.entries} == {"openai/stub-model"}
