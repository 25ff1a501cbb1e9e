"""Any LangGraph server as a system (`agent = "langgraph"`), against `langgraph dev` serving this
project's `deep_research` graph (langgraph.json) on a free port: the case goes in through the
recipe's input mapping, the remote graph is pointed at the run's endpoint through its runtime
context (so its model calls are in the run's ledger, tagged with the case), its clarify interrupt
is answered by the simulated user, the report comes back from the final state and is scored, its
cited pages are fetched into `sources/`; killing the server mid-episode fails that episode with the
reason named."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.external.langgraph_agent import at_path, cited_urls, filled
from atelier.graphs.pipelines import pipeline_options
from atelier.graphs.sources import SourceStore
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.langgraph_dev import langgraph_dev

pytest.importorskip("langgraph_sdk")

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"max_researchers": 2, "max_rounds": 2, "max_pages": 2, "max_tool_calls": 4}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with langgraph_dev(
        ROOT, "deep_research", {"ATELIER_CACHE_DIR": str(tmp_path_factory.mktemp("remote-cache"))}
    ) as served:
        yield served


def remote_system(name: str, url: str, model: str, **options) -> dict:
    """Our deep_research graph on the server, its models pointed at the run's endpoint."""
    endpoint = {"model": model, "api_base": "{openai_base}", "api_key": "{api_key}", "max_retries": 0}
    return {
        "name": name,
        "pipeline": "external",
        "memory": {"backend": "none"},
        "pipeline_options": {
            "agent": "langgraph",
            "url": url,
            "assistant_id": "deep_research",
            "input": {"benchmark": "{benchmark}", "case_id": "{case_id}"},
            "context": {
                "models": {"system": endpoint, "user_sim": endpoint, "judge": endpoint},
                "system": {
                    "name": "dr",
                    "pipeline": "deep_research",
                    "memory": {"backend": "full"},
                    "pipeline_options": {**SMALL, "clarify": "always", "max_questions": 2},
                },
                "clarify_answerer": "person",
            },
            "report": "response.text",
            "citations": "response.citations",
            "timeout_s": 300,
            **options,
        },
    }


def recipe(tmp: Path, name: str, systems: list[dict], system_model: str = "scripted", limit: int = 2):
    return parse_recipe(
        {
            "name": name,
            "benchmark": {"name": "sample", "setting": "context", "limit": limit},
            "models": {"system": {"model": system_model}, "judge": {"model": "scripted"}},
            "systems": systems,
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"dir": str(tmp / "llm")},
            "run": {"out_dir": str(tmp / name), "concurrency": 2},
        }
    )


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_langgraph_server_is_a_system_scored_in_every_episode(server, tmp_path):
    url, _ = server
    folder = run_recipe(recipe(tmp_path, "remote", [remote_system("remote-dr", url, "openai/remote")]), progress=False)
    results = lines(folder.results)
    assert len(results) == 2
    ledger = lines(folder.ledger)
    store = SourceStore.for_run(str(folder.path))
    for result in results:
        assert result["status"] == "ok", result.get("error")
        assert result["scores"]["lampqa_aspects"] is not None
        response = result["response"]
        meta = response["meta"]
        assert meta["agent"] == "langgraph" and meta["assistant_id"] == "deep_research" and meta["thread_id"]
        assert response["text"].startswith("DRY RUN")  # the remote graph's own report, from its final state
        # its clarify interrupt, answered by the simulated user and resumed
        (interrupt,) = meta["interrupts"]
        assert interrupt["value"]["questions"] and len(interrupt["answer"]["answers"]) == len(
            interrupt["value"]["questions"]
        )
        # the remote graph's model calls came through the run's endpoint: in the run's ledger, with the case
        remote = [e for e in ledger if e["case_id"] == result["case_id"] and e["node"].startswith("langgraph:")]
        assert remote and sum(meta["calls"].values()) == len(remote), [(e["node"], e["case_id"]) for e in ledger]
        assert {e["node"] for e in remote} == {"langgraph:deep_research:remote"}
        answered = [e for e in ledger if e["case_id"] == result["case_id"] and e["node"] == "interrupt"]
        assert answered and all(e["role"] == "user_sim" for e in answered)
        for citation in response["citations"]:  # its citations' pages, read through the run's web
            assert citation["sha256"] is None or store.get(citation["sha256"])
        assert meta["citations"]["cited"] == len(response["citations"])


@pytest.mark.battery  # kills the module's server (this project's deep_research graph): last of the file
def test_killing_the_server_mid_episode_fails_that_episode_naming_why(server, tmp_path):
    url, process = server
    folder_path = tmp_path / "killed"

    def kill_once_the_remote_graph_calls_the_endpoint() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if any("langgraph:deep_research" in ledger.read_text() for ledger in folder_path.glob("*/ledger.jsonl")):
                os.killpg(process.pid, signal.SIGKILL)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_once_the_remote_graph_calls_the_endpoint, daemon=True)
    killer.start()
    # each remote call takes 1.5 s at the run's model, so the episode is mid-run when the server dies
    systems = [remote_system("killed", url, "openai/remote-slow")]
    folder = run_recipe(recipe(tmp_path, "killed", systems, "scripted?latency_ms=1500", limit=1), progress=False)
    killer.join(timeout=5)
    assert process.poll() is not None, "the server was never killed"
    (result,) = lines(folder.results)
    assert result["status"] == "error"
    # named within seconds (its /ok unanswered), not after the SDK's reconnects give up (~49 s)
    said = result["error"]
    assert f"the LangGraph server at {url} went away during the run of 'deep_research'" in said or (
        f"the LangGraph server at {url} failed during the run of 'deep_research'" in said
    )
    summary = json.loads(folder.summary.read_text())
    assert summary["episodes"]["failed"] == 1


def test_langgraph_options_are_checked():
    with pytest.raises(ConfigError, match="needs url"):
        pipeline_options("external", {"agent": "langgraph", "url": "http://127.0.0.1:2025"})
    with pytest.raises(ConfigError, match="assistant_id: only for agent = 'langgraph'"):
        pipeline_options("external", {"agent": "open_deep_research", "assistant_id": "x"})
    with pytest.raises(ConfigError, match="interrupts"):
        pipeline_options("external", {"agent": "langgraph", "url": "u", "assistant_id": "a", "interrupts": "ask"})


def test_the_input_mapping_and_the_final_state_paths():
    values = {"brief": "B", "case_id": "q1", "openai_base": "http://127.0.0.1:9/v1"}
    mapping = {"messages": [{"role": "user", "content": "{brief}"}], "n": 3, "base": "at {openai_base}", "x": "{other}"}
    assert filled(mapping, values) == {
        "messages": [{"role": "user", "content": "B"}],
        "n": 3,
        "base": "at http://127.0.0.1:9/v1",
        "x": "{other}",  # not a placeholder: left as written
    }
    state = {"final_report": "R", "messages": [{"content": "a"}, {"content": "b"}], "response": {"text": "T"}}
    assert at_path(state, "final_report") == "R" and at_path(state, "response.text") == "T"
    assert at_path(state, "messages.-1.content") == "b" and at_path(state, "messages.5.content") is None
    assert at_path(state, "nothing.here") is None
    listed = cited_urls("x", ["https://a.example/", {"url": "https://b.example/", "title": "B"}, {"no": 1}])
    assert [(c.url, c.title, c.number) for c in listed] == [
        ("https://a.example/", "", 1),
        ("https://b.example/", "B", 2),
    ]
    found = cited_urls("See https://a.example/x. And https://b.example/y, again https://a.example/x", None)
    assert [c.url for c in found] == ["https://a.example/x", "https://b.example/y"]


def test_contexts_differing_only_in_a_key_do_not_share_a_gateway(tmp_path):
    """A served graph given each episode's own endpoint token must call with that token: resources
    were keyed by the context's JSON, which masks keys, so the second episode got the first's gateway."""
    from atelier.graphs.context import EpisodeContext
    from atelier.graphs.resources import resources_for

    def context(key: str) -> EpisodeContext:
        return EpisodeContext(
            run_id="keys", models={"system": {"model": "openai/x", "api_base": "http://127.0.0.1:9/v1", "api_key": key}}
        )

    first, second = resources_for(context("atl-one")), resources_for(context("atl-two"))
    assert first.gateway is not second.gateway
    assert second.gateway.settings("system").resolved_api_key() == "atl-two"
    assert resources_for(context("atl-one")) is first  # the same settings still share one
