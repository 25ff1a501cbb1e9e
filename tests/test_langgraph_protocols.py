"""A LangGraph server's own protocols and lifetimes (`agent = "langgraph"`), against `langgraph dev`
serving a small app that keeps DeerFlow's plan review as DeerFlow writes it
(tests/fixtures/langgraph_apps/deerflow_like.py): with `resume_as = "deerflow"` the simulated user
reviews the plan in the thread's state and its verdict resumes the run as `[ACCEPTED]` or
`[EDIT_PLAN] ...` (the only values the graph takes: the default answers fail the run, as they did
DeerFlow's); a run past the episode's time is cancelled on the server; a server that dies is named
by the episode's own check of it, not after the client's reconnects give up."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from atelier.agents.user_sim.plan_review import SimulatedPlanReview
from atelier.graphs.external.interrupt_answers import deerflow_resume, plan_steps
from atelier.runs.execution.runner import run_recipe
from tests.langgraph_dev import langgraph_dev
from tests.test_langgraph_agent import lines, recipe

pytest.importorskip("langgraph_sdk")

APP = Path(__file__).resolve().parent / "fixtures" / "langgraph_apps"


@pytest.fixture(scope="module")
def server():
    with langgraph_dev(APP, "deerflow_like") as served:
        yield served


def system(name: str, url: str, **options) -> dict:
    given_input = options.pop("input", {})
    return {
        "name": name,
        "pipeline": "external",
        "memory": {"backend": "full"},
        "pipeline_options": {
            "agent": "langgraph",
            "url": url,
            "assistant_id": "deerflow_like",
            "input": {
                "messages": [{"role": "user", "content": "{brief}"}],
                "research_topic": "{task}",
                "auto_accepted_plan": False,
                **given_input,
            },
            "report": "final_report",
            "timeout_s": 120,
            **options,
        },
    }


def test_deerflows_plan_review_is_answered_in_its_own_protocol(server, tmp_path):
    url, _ = server
    systems = [system("deerflow", url, resume_as="deerflow"), system("answers", url)]
    folder = run_recipe(recipe(tmp_path, "plan-review", systems), progress=False)
    results = lines(folder.results)
    ledger = lines(folder.ledger)
    for result in (r for r in results if r["system"] == "deerflow"):
        assert result["status"] == "ok", result.get("error")
        meta = result["response"]["meta"]
        asked = meta["interrupts"]
        assert all(a["value"] == "Please Review the Plan." for a in asked) and meta["resume_as"] == "deerflow"
        verdict = asked[0]["answer"]
        assert verdict["by"] == "simulated_user" and verdict["plan"][0].startswith("Background on ")
        if verdict["accept"]:
            assert [a["resume"] for a in asked] == ["[ACCEPTED]"]
            researched = verdict["plan"]
        else:  # DeerFlow planned again from the user's steps and asked again: its revision accepted
            assert asked[0]["resume"].startswith("[EDIT_PLAN] ") and len(asked) == 2
            assert asked[1]["resume"] == "[ACCEPTED]" and asked[1]["answer"]["by"] == "rule"
            researched = verdict["subtopics"]
            assert asked[1]["answer"]["plan"] == researched
        assert all(f"- {step}" in result["response"]["text"] for step in researched)
        # the user reviewed it with its own model, tagged as the interrupt's answer
        assert any(e["case_id"] == result["case_id"] and e["node"] == "interrupt" for e in ledger)
        (citation,) = result["response"]["citations"]
        assert citation["url"] == "https://wayfarer-notes.example/lisbon/where-to-stay" and citation["sha256"]
    # the default answers are no value DeerFlow's protocol takes: its run fails, and the episode says why
    for result in (r for r in results if r["system"] == "answers"):
        assert result["status"] == "error"
        assert "Interrupt value of" in result["error"] and "is not supported" in result["error"]


def test_deerflows_resume_values():
    accepted = SimulatedPlanReview(True, [], "It covers what I need.")
    edited = SimulatedPlanReview(False, ["Night trains", "Rail passes"], "I travel by rail only.")
    assert deerflow_resume(accepted) == "[ACCEPTED]"
    assert deerflow_resume(edited) == (
        "[EDIT_PLAN] I travel by rail only.\nResearch these steps instead:\n1. Night trains\n2. Rail passes"
    )
    plan = {"title": "T", "steps": [{"title": "A", "description": "a"}, {"description": "only b"}, {"title": ""}]}
    assert plan_steps(json.dumps(plan)) == plan_steps(plan) == ["A", "only b"]
    assert plan_steps("```json\n" + json.dumps(plan) + "\n```") == ["A", "only b"]
    assert plan_steps("not json") == [] and plan_steps(None) == []


def test_a_run_past_the_episodes_time_is_cancelled_on_the_server(server, tmp_path):
    from langgraph_sdk import get_client

    url, _ = server
    slow = system("slow", url, input={"auto_accepted_plan": True, "sleep_s": 60}, timeout_s=4)
    folder = run_recipe(recipe(tmp_path, "slow", [slow], limit=1), progress=False)
    (result,) = lines(folder.results)
    assert result["status"] == "error"
    assert "did not finish within 4 s (its run was cancelled on the server)" in result["error"]

    async def statuses() -> list[str]:
        client = get_client(url=url)
        found = []
        for thread in await client.threads.search(limit=100):
            found += [run["status"] for run in await client.runs.list(thread["thread_id"])]
        return found

    runs = asyncio.run(statuses())
    assert "interrupted" in runs  # the slow one, cancelled
    assert not {"running", "pending"} & set(runs)  # nothing left going on the server


@pytest.mark.battery  # a server of its own to kill: its start takes seconds of CPU
def test_a_server_that_dies_mid_run_is_named_by_the_episodes_own_check(tmp_path):
    with langgraph_dev(APP, "deerflow_like") as (url, process):
        killed = threading.Event()

        def kill_once_a_run_is_going() -> None:
            import httpx

            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    threads = httpx.post(f"{url}/threads/search", json={"limit": 10}, timeout=5).json()
                except httpx.HTTPError:
                    return
                for thread in threads:
                    runs = httpx.get(f"{url}/threads/{thread['thread_id']}/runs", timeout=5).json()
                    if any(run["status"] == "running" for run in runs):
                        os.killpg(process.pid, signal.SIGKILL)
                        killed.set()
                        return
                time.sleep(0.2)

        killer = threading.Thread(target=kill_once_a_run_is_going, daemon=True)
        killer.start()
        doomed = system("doomed", url, input={"auto_accepted_plan": True, "sleep_s": 60}, timeout_s=120)
        folder = run_recipe(recipe(tmp_path, "doomed", [doomed], limit=1), progress=False)
        killer.join(timeout=5)
        assert killed.is_set(), "the server was never killed"
    (result,) = lines(folder.results)
    assert result["status"] == "error"
    # the episode's own check of the server named it (its /ok unanswered), not the client's reconnects
    assert f"the LangGraph server at {url} went away during the run of 'deerflow_like'" in result["error"]
