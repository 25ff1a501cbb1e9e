"""deep_research and the simulated user in runs: its clarify interrupts answered by the simulator on
the sample suite, the answers reaching the research brief, the simulator's calls tagged with the
asking node; no gold text in any message the system's models were sent, even in a conversation."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import current_tags
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.conftest import GOLD_SENTINEL

SMALL = {
    "max_researchers": 2,
    "max_rounds": 1,
    "max_pages": 2,
    "max_tool_calls": 3,
    "clarify": "always",
    "max_questions": 2,
}


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def prompts(monkeypatch):
    """Every model request's messages with its role and node."""
    seen: list[tuple[str, str, str]] = []
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        seen.append((role, current_tags().get("node", ""), json.dumps(messages, ensure_ascii=False)))
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    return seen


def recipe(tmp_path, benchmark: str, limit: int, clarify: bool = True, **system):
    return parse_recipe(
        {
            "name": "deep",
            "benchmark": {"name": benchmark, "limit": limit},
            "systems": [
                {
                    "name": "deep",
                    "pipeline": "deep_research",
                    "memory": {"backend": "full"},
                    "pipeline_options": SMALL,
                    **system,
                }
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "user_sim": {"clarify": clarify},
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


def test_a_deep_research_run_on_the_sample_suite_answers_its_clarify_interrupts_from_the_simulator(
    tmp_path, cache_dir, prompts
):
    folder = run_recipe(recipe(tmp_path, "sample", 3), progress=False)
    results = lines(folder.results)
    assert len(results) == 3 and all(r["status"] == "ok" for r in results), [r["error"] for r in results]
    ledger = lines(folder.ledger)
    simulator = [e for e in ledger if e["role"] == "user_sim"]
    assert sorted(e["case_id"] for e in simulator) == sorted(r["case_id"] for r in results)  # one answer each
    assert {e["node"] for e in simulator} == {"ask_user"} and all(e["system"] == "deep" for e in simulator)
    for result in results:
        clarify = result["response"]["meta"]["clarify"]
        assert clarify["status"] == "answered" and 1 <= len(clarify["questions"]) <= 2
        assert len(clarify["answers"]) == len(clarify["questions"]) and all(a.strip() for a in clarify["answers"])
    briefs = [m for role, node, m in prompts if node == "write_brief"]
    assert len(briefs) == 3
    for result in results:  # the simulator's answers are what the brief was written from
        answers = result["response"]["meta"]["clarify"]["answers"]
        assert any(all(json.dumps(a, ensure_ascii=False)[1:-1] in brief for a in answers) for brief in briefs)
    assert all(r["scores"]["lampqa_aspects"] is not None for r in results)


def test_without_the_simulator_the_clarify_step_is_skipped_and_recorded(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path, "sample", 1, clarify=False), progress=False)
    [result] = lines(folder.results)
    assert result["status"] == "ok" and result["response"]["meta"]["clarify"]["status"] == "skipped"
    assert not [e for e in lines(folder.ledger) if e["role"] == "user_sim"]


def test_no_gold_reaches_deep_research_through_clarifications_or_a_conversation(
    tmp_path, cache_dir, prompts, monkeypatch
):
    original = Gateway.structured

    async def copycat(self, role, messages, schema):  # a simulator that tries to pass its hidden need on verbatim
        answer = await original(self, role, messages, schema)
        if role != "user_sim":
            return answer
        need = messages[1]["content"].split("You asked: ", 1)[1].split("\n\n", 1)[1].split("\n", 1)[0]
        data = answer.model_dump()
        if "answers" in data:
            data["answers"] = [{"question": i, "known": True, "answer": f"{need}, really."} for i in range(1, 3)]
        else:
            data.update({"message": f"I told you: {need}", "satisfied": False})
        return schema.model_validate(data)

    monkeypatch.setattr(Gateway, "structured", copycat)
    folder = run_recipe(recipe(tmp_path, "tiny", 2, conversation={"max_turns": 2}), progress=False)
    results = lines(folder.results)
    assert len(results) == 2 and all(r["status"] == "ok" for r in results), [r["error"] for r in results]
    by_role = defaultdict(list)
    for role, node, messages in prompts:
        by_role[role].append((node, messages))
    system_side = [
        m for role, calls in by_role.items() if role not in ("user_sim", "judge", "lampqa_judge") for _, m in calls
    ]
    assert len(system_side) > 10
    assert not any(GOLD_SENTINEL in m for m in system_side)
    assert all(GOLD_SENTINEL in m for _, m in by_role["user_sim"])  # the simulator is grounded on the need
    nodes = Counter(node for node, _ in by_role["user_sim"])
    # 2 cases x 2 turns, 1 follow-up each; clarifying questions on the first turn only
    assert nodes["ask_user"] == 2 and nodes["simulated_user"] == 2
    assert all(r["response"]["meta"]["conversation"]["user_turns"] == 2 for r in results)
    for result in results:
        first, follow_up = [turn["meta"]["clarify"] for turn in result["response"]["meta"]["conversation"]["turns"]]
        assert first["status"] == "answered" and follow_up["status"] == "not_needed"
    assert all("…" in r["response"]["text"] for r in results)  # what the guard left of the copied need
