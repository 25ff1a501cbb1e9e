"""The shipped wrappers of PDR-Bench's open-source agents (graphs/external/wrappers: MiroFlow's
`main.py trace`, OAgents' `run.py`) as command agents, against a fake checkout that follows both
command lines and outputs (tests/fixtures/agents/fake_checkout): the case's brief is the agent's
task, its model calls reach the run's endpoint (ledgered with the case, under the agent's model
name), its Serper searches and Jina reads reach the run's web (the page it cites is read, its
text in sources/), its report is taken from the agent's own output, and the MCP server it left
running ends with it. A checkout that is not there, or an agent that ends unfinished, fails the
episode saying so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from atelier.graphs.sources import SourceStore
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.test_command_agent import running

ROOT = Path(__file__).resolve().parent.parent
WRAPPERS = ROOT / "graphs" / "external" / "wrappers"
FAKE = ROOT / "tests" / "fixtures" / "agents" / "fake_checkout"  # outside /tmp: the boundary's /tmp is its own


def wrapped(name: str, wrapper: str, checkout: Path, **options) -> dict:
    return {
        "name": name,
        "pipeline": "external",
        "memory": {"backend": "persona"},
        "pipeline_options": {
            "agent": "command",
            "command": [sys.executable, str(WRAPPERS / wrapper), "--checkout", str(checkout)],
            "timeout_s": 120,
            **options,
        },
    }


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wrappers")
    recipe = parse_recipe(
        {
            "name": "wrappers",
            "benchmark": {"name": "sample", "setting": "persona", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                wrapped(
                    "miroflow",
                    "miroflow.py",
                    FAKE,
                    settings={"config": "agent_pdr", "overrides": ["main_agent.max_turns=20"]},
                    call_roles={"fake-miroflow": "researcher"},
                ),
                wrapped("oagents", "oagents.py", FAKE, settings={"model_id": "openai/fake-oagents"}),
                wrapped("no-checkout", "oagents.py", FAKE / "not-there"),
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"dir": str(tmp / "llm")},
            "run": {"out_dir": str(tmp / "run"), "concurrency": 3},
        }
    )
    return run_recipe(recipe, progress=False)


@pytest.mark.parametrize(("name", "model"), [("miroflow", "fake-miroflow"), ("oagents", "fake-oagents")])
def test_a_wrapped_agent_researches_the_runs_web_with_the_runs_model(folder, name, model):
    result = {r["system"]: r for r in lines(folder.results)}[name]
    assert result["status"] == "ok", result.get("error")
    response = result["response"]
    meta = response["meta"]
    # it searched with Serper's API and read with Jina's reader: the run's web, in its web log
    assert meta["searches"] == 1 and meta["fetches"] == 1
    (citation,) = response["citations"]  # the page it read and named in its report
    assert citation["url"] in response["text"] and SourceStore.for_run(str(folder.path)).get(citation["sha256"])
    assert response["degraded"] == []
    (call,) = [e for e in lines(folder.ledger) if e["system"] == name and e["node"] == f"command:{model}"]
    assert call["case_id"] == result["case_id"] and call["status"] == "ok"
    if name == "miroflow":  # its settings became MiroFlow's config and hydra overrides; its MCP server ended
        assert meta["details"]["overrides"] == ["main_agent.max_turns=20"] and call["role"] == "researcher"
        log = next((folder.path / "external" / name).glob("*/agent.log")).read_text()
        assert "config agent_pdr, overrides ['main_agent.max_turns', 'output_dir']" in log
        assert running(("sleep", "7775")) == []
    else:
        assert meta["details"]["model_id"] == "openai/fake-oagents"


def test_a_wrapper_without_its_checkout_fails_its_episode_saying_where_the_code_goes(folder):
    result = {r["system"]: r for r in lines(folder.results)}["no-checkout"]
    assert result["status"] == "error"
    assert "not-there is not a folder (see docs/external-agents.md: where its code goes)" in result["error"]
