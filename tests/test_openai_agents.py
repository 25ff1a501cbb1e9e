"""The third registry agent: the OpenAI Agents SDK's research bot (`agent = "openai_agents"`),
researching on the scripted model through the run's endpoint and agent web: its planner, search and
writer agents' calls are each in the ledger, tagged with the case, its search agent's searches are
in the run's web log, and the report is scored."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe

pytest.importorskip("openai")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_openai_agents_research_bot_researches_on_the_scripted_model(tmp_path, cache_dir):
    import importlib.metadata

    try:
        importlib.metadata.version("openai-agents")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("openai-agents is not installed (the agents extra)")
    recipe = parse_recipe(
        {
            "name": "openai-agents",
            "benchmark": {"name": "sample", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": "oa-full",
                    "pipeline": "external",
                    "memory": {"backend": "full"},
                    "pipeline_options": {"agent": "openai_agents", "settings": {"max_searches": 2}},
                }
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "run")},
        }
    )
    folder = run_recipe(recipe, progress=False)
    (result,) = lines(folder.results)
    assert result["status"] == "ok", result.get("error")
    assert result["scores"]["lampqa_aspects"] is not None
    meta = result["response"]["meta"]
    assert meta["agent"] == "openai_agents" and meta["isolation"] == "namespaces"
    calls = [e for e in lines(folder.ledger) if e["system"] == "oa-full" and e["node"].startswith("openai_agents:")]
    by_agent = Counter(e["node"].split(":", 1)[1] for e in calls if e["kind"] != "repair")
    assert by_agent == Counter(meta["calls"])
    assert by_agent["planner"] == 1 and by_agent["writer"] == 1
    assert by_agent["search"] >= 2  # each planned search's agent: its tool call, then its summary
    assert all(e["case_id"] == result["case_id"] and e["role"] in ("planner", "researcher", "writer") for e in calls)
    # its searches went through the run's web: in the web log, and every page it read in sources/
    assert meta["searches"] >= 1 and meta["details"]["searched"]
    searched = [e for e in lines(folder.path / "web_log.jsonl") if e["kind"] == "search"]
    assert len(searched) >= meta["searches"]
    # its max_searches holds whatever its search agents' tool calls do: the run's web answers 2, refuses the rest
    assert meta["searches"] == 2
    assert meta["searches"] + meta["searches_refused"] == len(meta["details"]["searched"])
    assert meta["sources_read"] and all(s["sha256"] for s in meta["sources_read"])
