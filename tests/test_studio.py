"""LangGraph Studio serves the graphs in langgraph.json: `langgraph dev` starts offline; every graph
shows its input form, runs alone from a `{"benchmark", "case_id"}` reference on the embedded
defaults and reports bad input with its real message; a deep_research thread stops at the clarify
interrupt, resumes with typed answers, and its history steps through every node. Driven over HTTP
with langgraph-sdk, on a free port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from atelier.graphs.studio_config import SHIPPED

ROOT = Path(__file__).resolve().parent.parent
SERVED = set(SHIPPED)  # what atelier studio serves too
CASE = {"benchmark": "sample", "case_id": "q01"}
SMALL = {"max_researchers": 2, "max_rounds": 2, "max_pages": 2, "max_tool_calls": 4}


def test_langgraph_json_names_importable_compiled_graphs():
    import importlib

    config = json.loads((ROOT / "langgraph.json").read_text())
    assert set(config["graphs"]) == SERVED
    for name, target in config["graphs"].items():
        path, attr = target.split(":")
        module = importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", "."))
        graph = getattr(module, attr)
        assert hasattr(graph, "ainvoke") and graph.get_graph().nodes, name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    port = _free_port()
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path_factory.mktemp("studio-cache"))}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "langgraph"),
            "dev",
            "--port",
            str(port),
            "--no-browser",
            "--no-reload",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("langgraph dev did not answer /ok within 180 s")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def _client(base: str):
    from langgraph_sdk import get_client

    return get_client(url=base, timeout=httpx.Timeout(300.0))


async def _run(client, graph: str, run_input: dict, context: dict | None = None) -> dict:
    thread = await client.threads.create()
    return await client.runs.wait(thread["thread_id"], graph, input=run_input, context=context)


async def test_every_served_graph_shows_its_input_form(studio):
    client = _client(studio)
    for graph in SERVED:
        [assistant] = await client.assistants.search(graph_id=graph)
        schemas = await client.assistants.get_schemas(assistant["assistant_id"])
        properties = (schemas["input_schema"] or {}).get("properties", {})
        assert {"benchmark", "case_id"} <= set(properties), graph  # the form Studio draws
        assert schemas["context_schema"]["properties"]["system"], graph


async def test_every_served_graph_runs_alone_from_a_case_reference(studio):
    client = _client(studio)
    episode = await _run(client, "episode", CASE)
    assert episode["user_context"]["backend"] == "full" and episode["user_context"]["event_ids"]
    assert episode["response"]["text"].startswith("DRY RUN")
    [judgment] = episode["judgments"]
    assert judgment["judge"] == "lampqa_aspects" and 0 <= judgment["score"] <= 1

    memory = await _run(client, "memory", CASE)
    assert memory["user_context"]["event_ids"][0].startswith("u1:")
    for graph, options in (
        ("direct", {}),
        ("rag", {"max_pages": 2}),
        ("planpers", {}),
        ("deep_research", {**SMALL, "clarify": "never"}),
    ):
        context = {
            "system": {"name": graph, "pipeline": graph, "memory": {"backend": "full"}, "pipeline_options": options}
        }
        out = await _run(client, graph, CASE, context)
        assert out["response"]["text"].startswith("DRY RUN"), (graph, out)
        rag_like = graph in ("rag", "deep_research")
        assert ("citations" in out["response"]["meta"]) is rag_like
    judged = await _run(client, "judge", {**CASE, "response": {"text": "Take the Intercidades train."}})
    assert judged["judgments"][0]["judge"] == "lampqa_aspects"

    rag_episode = await _run(client, "episode", CASE, {"system": {"name": "rag-none", "pipeline": "rag"}})
    assert "citations" in rag_episode["response"]["meta"]  # the episode runs the pipeline its context names


@pytest.mark.parametrize(
    ("graph", "run_input", "context", "message"),
    [
        ("episode", {"benchmark": "sample", "case_id": "nope"}, None, "no case 'nope' in benchmark 'sample'"),
        ("direct", {"benchmark": "nowhere", "case_id": "q01"}, None, "cannot load benchmark 'nowhere'"),
        ("memory", {"benchmark": "sample"}, None, 'give the case: {"benchmark": "sample", "case_id": "q01"}'),
        ("judge", CASE, None, "give the response to judge"),
        (
            "rag",
            CASE,
            {"system": {"name": "r", "pipeline": "rag", "pipeline_options": {"max_pagess": 2}}},
            "pipeline_options.max_pagess: Extra inputs are not permitted",
        ),
    ],
)
async def test_bad_input_reaches_the_client_with_its_real_message(studio, graph, run_input, context, message):
    client = _client(studio)
    with pytest.raises(Exception) as info:
        await _run(client, graph, run_input, context)
    assert message in str(info.value) and "internal error" not in str(info.value)


async def test_a_deep_research_thread_stops_to_clarify_resumes_with_typed_answers_and_steps_through_every_node(studio):
    client = _client(studio)
    context = {
        "system": {
            "name": "dr",
            "pipeline": "deep_research",
            "memory": {"backend": "full"},
            "pipeline_options": {**SMALL, "clarify": "always", "max_questions": 2},
        }
    }
    thread = (await client.threads.create())["thread_id"]
    first = await client.runs.wait(thread, "deep_research", input=CASE, context=context)
    [pending] = first["__interrupt__"]
    questions = pending["value"]["questions"]
    assert 1 <= len(questions) <= 2 and all(isinstance(q, str) and q for q in questions)
    state = await client.threads.get_state(thread)
    assert state["next"] == ["ask_user"]

    events = []
    async for part in client.runs.stream(
        thread,
        "deep_research",
        command={"resume": {"answers": ["Late May"]}},
        context=context,
        stream_mode="events",
        stream_subgraphs=True,
    ):
        if part.event.startswith("events"):
            events.append(part.data)
    final = (await client.threads.get_state(thread))["values"]
    clarify = final["response"]["meta"]["clarify"]
    assert clarify["status"] == "answered" and clarify["answers"][0] == "Late May"
    assert final["response"]["text"].startswith("DRY RUN")

    history = await client.threads.get_history(thread, limit=100)
    visited = {node for checkpoint in history for node in checkpoint["next"]}
    assert {"clarify", "ask_user", "write_brief", "plan", "researcher", "reflect", "write_report"} <= visited

    # each LLM call is in the run's trace with its prompt and its answer, tagged with its node
    ends = [e for e in events if e["event"] == "on_chat_model_end"]
    starts = [e for e in events if e["event"] == "on_chat_model_start"]
    assert ends and len(starts) == len(ends)
    brief = next(e for e in starts if e["metadata"].get("langgraph_node") == "write_brief")
    assert "Late May" in json.dumps(brief["data"]["input"])
    report = next(e for e in ends if e["metadata"].get("langgraph_node") == "write_report")
    assert report["data"]["output"]["content"].startswith("DRY RUN")


async def test_the_simulate_graph_talks_with_the_simulated_user_over_http(studio):
    client = _client(studio)
    out = await _run(
        client,
        "simulate",
        CASE,
        {
            "system": {
                "name": "talk",
                "pipeline": "direct",
                "memory": {"backend": "full"},
                "conversation": {"max_turns": 2},
            }
        },
    )
    assert out["response"]["text"].startswith("## Turn 1\n\n**User:** ")
    conversation = out["response"]["meta"]["conversation"]
    assert 1 <= conversation["user_turns"] <= 2 and conversation["ended"] in (
        "satisfied",
        "gave_up",
        "turn_budget",
        "nothing_left_to_say",
    )


async def test_an_external_agent_runs_in_studio_and_its_model_calls_show_in_the_trace(studio):
    pytest.importorskip("gpt_researcher")
    client = _client(studio)
    context = {
        "system": {
            "name": "gptr",
            "pipeline": "external",
            "memory": {"backend": "full"},
            "pipeline_options": {"agent": "gpt_researcher", "settings": {"MAX_ITERATIONS": 1}},
        }
    }
    thread = (await client.threads.create())["thread_id"]
    events = [
        part.data
        async for part in client.runs.stream(
            thread, "external", input=CASE, context=context, stream_mode="events", stream_subgraphs=True
        )
        if part.event.startswith("events")
    ]
    final = (await client.threads.get_state(thread))["values"]
    meta = final["response"]["meta"]
    assert final["response"]["text"].startswith("DRY RUN") and meta["agent"] == "gpt_researcher"
    assert "What you know about the user" in final["brief"]  # the memory's context went into the agent's input
    history = await client.threads.get_history(thread, limit=20)
    assert {"brief", "run_agent"} <= {node for checkpoint in history for node in checkpoint["next"]}
    # every chat request the agent made through the endpoint is a model run of the run_agent node
    ends = [
        e for e in events if e["event"] == "on_chat_model_end" and e["metadata"].get("langgraph_node") == "run_agent"
    ]
    assert len(ends) == sum(n for call, n in meta["calls"].items() if call != "embeddings") > 0
