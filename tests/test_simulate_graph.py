"""The simulated user inside runs: multi-turn conversations (graphs/simulate.py) and clarify
interrupts answered by the simulator; the gold boundary over every message the system's model got."""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict

import pytest
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from atelier.agents.clarify import ClarifyAnswers, ClarifyRequest
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import Citation, SystemResponse
from atelier.agents.user_sim import STOP_TOKEN
from atelier.benchmarks.case import ConversationTurn
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput, case_view
from atelier.graphs.pipelines import PIPELINES, PipelineSpec
from atelier.graphs.resources import resources_for
from atelier.graphs.simulate import transcript
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import Recipe, parse_recipe
from tests.conftest import GOLD_SENTINEL


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def system_messages(monkeypatch):
    """Every message list each role's model was sent during the test, by role."""
    seen: dict[str, list[str]] = defaultdict(list)
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        seen[role].append(json.dumps(messages, ensure_ascii=False))
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    return seen


def test_transcript_is_the_conversation_turn_by_turn():
    turns = [
        ConversationTurn(utterance="Plan my meals.", response="Eat lentils [1]."),
        ConversationTurn(utterance="Cheaper, please.", response="Buy dried lentils [1][2]."),
    ]
    responses = [
        SystemResponse(text="a", citations=[Citation(source_id="s1", url="https://a.example/")]),
        SystemResponse(text="b", citations=[Citation(source_id="s1"), Citation(source_id="s2")], meta={"k": 1}),
    ]
    response = transcript(turns, responses, "satisfied")
    assert response.text == (
        "## Turn 1\n\n**User:** Plan my meals.\n\n**Assistant:** Eat lentils [1].\n\n"
        "## Turn 2\n\n**User:** Cheaper, please.\n\n**Assistant:** Buy dried lentils [1][2].\n\n"
        f"**User:** {STOP_TOKEN}"
    )
    assert [c.source_id for c in response.citations] == ["s1", "s2"] and response.citations[
        0
    ].url == "https://a.example/"
    conversation = response.meta["conversation"]
    assert conversation["user_turns"] == 2 and conversation["ended"] == "satisfied"
    assert conversation["turns"][1] == {
        "user": "Cheaper, please.",
        "assistant": "Buy dried lentils [1][2].",
        "meta": {"k": 1},
    }
    assert not transcript(turns[:1], responses[:1], "turn_budget").text.endswith(STOP_TOKEN)


def conversation_recipe(tmp_path, max_turns=3):
    return parse_recipe(
        {
            "name": "talk",
            "benchmark": {"name": "tiny"},
            "systems": [{"name": "talk", "memory": {"backend": "full"}, "conversation": {"max_turns": max_turns}}],
            "models": {"user_sim": {"model": "scripted?seed=2"}},  # a seed whose user follows up on some case
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


def test_a_conversation_runs_within_its_turn_budget_and_judges_see_the_transcript(tmp_path, cache_dir, system_messages):
    folder = run_recipe(conversation_recipe(tmp_path), progress=False)
    results = {r["case_id"]: r for r in lines(folder.results)}
    assert len(results) == 3 and all(r["status"] == "ok" for r in results.values())
    ledger = lines(folder.ledger)
    answers = Counter(e["case_id"] for e in ledger if e["role"] == "system")
    users = Counter(e["case_id"] for e in ledger if e["role"] == "user_sim")
    assert {e["node"] for e in ledger if e["role"] == "user_sim"} == {"simulated_user"}
    stops = set()
    for case_id, result in results.items():
        text = result["response"]["text"]
        assert result["response"]["meta"]["conversation"]["user_turns"] == text.count("## Turn ")
        turns = text.count("## Turn ")
        assert 1 <= turns <= 3 and text.startswith("## Turn 1\n\n**User:** ")
        assert answers[case_id] == turns  # one system answer per turn
        stopped = text.endswith(f"**User:** {STOP_TOKEN}")
        stops.add(stopped)
        # the user is asked after every turn, except after the last when the budget ran out
        assert users[case_id] == (turns if stopped else turns - 1)
        assert turns == 3 or stopped
        assert result["scores"]["lampqa_aspects"] is not None  # the judges scored the transcript
    # how each conversation ended is counted per system, in the summary and the report
    summary = json.loads(folder.summary.read_text())
    ended = Counter(r["response"]["meta"]["conversation"]["ended"] for r in results.values())
    assert summary["systems"]["talk"]["conversations"] == dict(sorted(ended.items()))
    assert set(ended) <= {"satisfied", "gave_up", "turn_budget", "nothing_left_to_say"}
    row = folder.report.read_text().split('id="conversations"')[1].split("</table>")[0]
    assert "<td>talk</td>" in row and all(f'<td class="num">{ended.get(e, 0)}</td>' in row for e in ended)
    # the system's later turns carry the conversation so far; never any gold
    assert any("The conversation so far" in m for m in system_messages["system"])
    assert not any(GOLD_SENTINEL in m for m in system_messages["system"])
    assert all(GOLD_SENTINEL in m for m in system_messages["user_sim"])  # the simulator is grounded on it


def test_a_one_turn_budget_never_asks_the_user(tmp_path, cache_dir):
    folder = run_recipe(conversation_recipe(tmp_path, max_turns=1), progress=False)
    assert not [e for e in lines(folder.ledger) if e["role"] == "user_sim"]
    assert all(r["response"]["text"].count("## Turn ") == 1 for r in lines(folder.results))


# ----------------------------------------------------------------------------- clarify interrupts

QUESTIONS = ["What should the plan focus on?", "Any constraints I should respect?"]


class AskingState(PipelineInput, PipelineOutput, total=False):
    pass


async def ask_then_answer(state: AskingState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    """A system that asks clarifying questions (LangGraph interrupt), then answers with what it was told."""
    reply = interrupt(ClarifyRequest(questions=QUESTIONS))
    answers = reply if isinstance(reply, ClarifyAnswers) else ClarifyAnswers.model_validate(reply)
    told = "\n".join(f"{q} {a}" for q, a in zip(QUESTIONS, answers.answers))
    gateway = resources_for(runtime.context).gateway
    view = case_view(state, runtime.context)
    messages = build_messages(
        "You are a helpful assistant.", [Section("The user told you", told, untrusted=True)], view.query.text
    )
    text = await gateway.text("system", messages)
    return {"response": SystemResponse(text=text, meta={"clarify": {"answers": answers.answers}})}


@pytest.fixture
def asking_pipeline(monkeypatch):
    from langgraph.graph import START, StateGraph

    def build():
        graph = StateGraph(
            AskingState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
        )
        graph.add_node("clarify", ask_then_answer)
        graph.add_edge(START, "clarify")
        return graph.compile(name="asking")

    monkeypatch.setitem(PIPELINES._entries, "asking", PipelineSpec("asking", "asks first", build))


def asking_recipe(
    tmp_path, clarify: bool = True
) -> Recipe:  # unchecked: the test pipeline is not in the checker's list
    return Recipe.model_validate(
        {
            "name": "asks",
            "benchmark": {"name": "tiny"},
            "systems": [{"name": "asks", "pipeline": "asking", "memory": {"backend": "none"}}],
            "judges": [],
            "run": {"out_dir": str(tmp_path / "out")},
            "user_sim": {"clarify": clarify},
        }
    )


def test_without_a_simulated_user_for_clarifications_the_episode_fails_naming_why(tmp_path, cache_dir, asking_pipeline):
    folder = run_recipe(asking_recipe(tmp_path, clarify=False), progress=False)
    errors = [r["error"] for r in lines(folder.results)]
    assert len(errors) == 3 and all(
        "asked the user 2 clarifying question(s)" in e and "[user_sim] clarify = true" in e for e in errors
    )
    assert not folder.ledger.exists()  # no model was called: the system asks before it answers


def test_runs_answer_clarify_interrupts_with_the_simulated_user(tmp_path, cache_dir, asking_pipeline, system_messages):
    folder = run_recipe(asking_recipe(tmp_path), progress=False)
    results = lines(folder.results)
    assert len(results) == 3 and all(r["status"] == "ok" for r in results), results
    ledger = lines(folder.ledger)
    simulator = [e for e in ledger if e["role"] == "user_sim"]
    assert len(simulator) == 3 and all(
        e["node"] == "clarify" and e["case_id"] and e["system"] == "asks" for e in simulator
    )
    assert Counter(e["node"] for e in ledger if e["role"] == "system") == {"clarify": 3}
    assert len(system_messages["system"]) == 3
    assert all(QUESTIONS[0] in m for m in system_messages["system"])  # the answers reached the system
    assert not any(GOLD_SENTINEL in m for m in system_messages["system"])


def test_a_simulator_copying_the_gold_need_is_stopped_at_the_boundary(
    tmp_path, cache_dir, asking_pipeline, system_messages, monkeypatch
):
    original = Gateway.structured

    async def copycat(self, role, messages, schema):
        if role != "user_sim":
            return await original(self, role, messages, schema)
        need = messages[1]["content"].split("You asked: ", 1)[1].split("\n\n", 1)[1].split("\n", 1)[0]
        return schema.model_validate(
            {
                "answers": [
                    {"question": 1, "known": True, "answer": need},
                    {"question": 2, "known": True, "answer": f"just {GOLD_SENTINEL}"},
                ]
            }
        )

    monkeypatch.setattr(Gateway, "structured", copycat)
    folder = run_recipe(asking_recipe(tmp_path), progress=False)
    assert all(r["status"] == "ok" for r in lines(folder.results))
    assert len(system_messages["system"]) == 3
    assert not any(GOLD_SENTINEL in m for m in system_messages["system"])
    assert all("… need …" in m and "just …" in m for m in system_messages["system"])  # what was left of it


async def test_studio_serves_the_simulate_graph_on_the_embedded_defaults(cache_dir):
    from atelier.graphs import studio

    out = await studio.simulate.ainvoke({"benchmark": "sample", "case_id": "q01"})
    assert out["response"].text.startswith("## Turn 1\n\n**User:** ")
    conversation = out["response"].meta["conversation"]
    assert 1 <= conversation["user_turns"] <= 3 and conversation["ended"] in (
        "satisfied",
        "gave_up",
        "turn_budget",
        "nothing_left_to_say",
    )
    assert out["judgments"] and out["judgments"][0].judge == "lampqa_aspects"


def test_an_episode_left_at_its_clarify_interrupt_resumes_there(tmp_path, cache_dir, asking_pipeline):
    broken = asking_recipe(tmp_path).model_copy(deep=True)
    broken.models["user_sim"] = broken.role_models()["user_sim"].model_copy(
        update={"model": "scripted?error_rate=1", "max_retries": 0}
    )
    folder = run_recipe(broken, tmp_path / "run", progress=False)
    assert all(r["status"] == "error" and "user_sim model" in r["error"] for r in lines(folder.results))
    assert asyncio.run(stored_interrupt(folder.checkpoints, "tiny:0::asks")) == ClarifyRequest(questions=QUESTIONS)

    fixed = asking_recipe(tmp_path)
    fixed.models["user_sim"] = broken.models["user_sim"].model_copy(update={"model": "scripted?error_rate=0"})
    run_recipe(fixed, folder.path, progress=False)  # same answer identity: the folder resumes
    latest = {r["key"]: r for r in lines(folder.results)}
    assert len(latest) == 3 and all(r["status"] == "ok" for r in latest.values())
    # each episode went on from its stored interrupt (read back from checkpoints.sqlite): asked once, answered once
    ledger = [e for e in lines(folder.ledger) if e["status"] == "ok"]
    assert sorted(e["case_id"] for e in ledger if e["role"] == "user_sim") == ["tiny:0", "tiny:1", "tiny:2"]
    assert sorted(e["case_id"] for e in ledger if e["role"] == "system") == ["tiny:0", "tiny:1", "tiny:2"]


async def stored_interrupt(checkpoints, thread_id):
    """The clarify request an episode's checkpoint is waiting on, read back through the run's serializer."""
    from atelier.graphs.episode import build_episode_graph
    from atelier.graphs.persistence import run_checkpointer

    async with run_checkpointer(checkpoints.parent) as saver:
        graph = build_episode_graph("asking", checkpointer=saver)
        snapshot = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    [task] = snapshot.tasks
    return task.interrupts[0].value
