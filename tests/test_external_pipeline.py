"""External deep-research agents through `atelier run`: open_deep_research and gpt-researcher on a
sample case, with the scripted model behind the gateway endpoint. Every LLM call they make is in
the ledger with its case and system, every search and fetch in web_log.jsonl, nothing leaves the
machine, and a second run of the same recipe makes no provider call and gives the same results."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.errors import ConfigError
from runs.recipe import load_recipe, parse_recipe
from runs.runner import run_recipe

pytest.importorskip("open_deep_research")
pytest.importorskip("gpt_researcher")

AGENT_OF = {"odr-full": "open_deep_research", "gptr-full": "gpt_researcher", "odr-broken": "open_deep_research"}
# The scripted researcher's seed for open_deep_research: with it, its supervisor starts a research
# unit whose researcher calls `web_search` on the sample case (a seed that ends research at once
# would leave the search path untested; the assertions below say so if that ever happens). The
# scripted model's free text is not the JSON gpt-researcher asks for in prose; on this case
# json_repair still reads a list of sub-queries out of it, on others gpt-researcher fails, and the
# run says so (see the broken system below for what a failure looks like).
RESEARCHER_SEED = 101


def external_recipe(tmp_path: Path, out: str):
    odr_settings = {"max_researcher_iterations": 2, "max_react_tool_calls": 2, "max_concurrent_research_units": 1}
    return parse_recipe({
        "name": "external",
        "benchmark": {"name": "sample", "setting": "context", "limit": 1},
        "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
        "systems": [
            {"name": "odr-full", "pipeline": "external", "memory": {"backend": "full"},
             "models": {"researcher": {"model": f"scripted?seed={RESEARCHER_SEED}"}},
             "pipeline_options": {"agent": "open_deep_research", "today": "2026-01-15", "settings": odr_settings}},
            {"name": "gptr-full", "pipeline": "external", "memory": {"backend": "full"},
             "pipeline_options": {"agent": "gpt_researcher", "today": "2026-01-15",
                                  "settings": {"MAX_ITERATIONS": 2, "MAX_SEARCH_RESULTS_PER_QUERY": 3,
                                               "TOTAL_WORDS": 300}}},
            {"name": "odr-broken", "pipeline": "external", "memory": {"backend": "none"},
             "pipeline_options": {"agent": "open_deep_research", "settings": {"research_model": "no-such-provider:x"}}},
        ],
        "judges": [{"name": "lampqa_aspects"}],
        "cache": {"dir": str(tmp_path / "llm")},
        "run": {"out_dir": str(tmp_path / out), "concurrency": 3},
    })


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_external_agents_run_through_the_gateway_endpoint_and_replay_from_the_cache(tmp_path):
    folder = run_recipe(external_recipe(tmp_path, "first"), progress=False)
    results = {r["system"]: r for r in lines(folder.results)}
    assert results["odr-full"]["status"] == "ok" and results["gptr-full"]["status"] == "ok"
    broken = results["odr-broken"]
    assert broken["status"] == "error" and "open_deep_research failed" in broken["error"]
    assert "no-such-provider" in broken["error"] and "agent.log" in broken["error"]

    responses = {name: results[name]["response"] for name in ("odr-full", "gptr-full")}
    for name, response in responses.items():  # the agent's work folder keeps it too, beside its log
        assert json.loads(next((folder.path / "external" / name).glob("*/response.json")).read_text()) == response
    ledger = lines(folder.ledger)
    web_log = lines(folder.path / "web_log.jsonl")
    seen_urls = {e["request"]["url"] for e in web_log if e["kind"] == "fetch"}
    for name, response in responses.items():
        agent, meta = AGENT_OF[name], response["meta"]
        assert meta["refused"] == []  # the offline guard refused nothing: nothing tried to leave the machine
        mine = [e for e in ledger if e["system"] == name and e["node"].startswith(f"{agent}:")]
        # one ledger line per request the agent made (plus the gateway's own repair turns)
        assert Counter(e["node"].split(":", 1)[1] for e in mine if e["kind"] != "repair") == Counter(meta["calls"])
        assert all(e["case_id"] == results[name]["case_id"] and e["status"] == "ok" for e in mine)
        assert meta["searches"] > 0, f"{agent} never searched: the web path went untested"
        # citations are sources the agent was shown, by their citable URL (never the endpoint's page URL)
        assert all(c["source_id"] and not c["url"].startswith("http://127.0.0.1") for c in response["citations"])
        assert "http://127.0.0.1" not in response["text"]
    assert {"open_deep_research:research", "open_deep_research:final_report"} <= {e["node"] for e in ledger}
    assert {"gpt_researcher:smart", "gpt_researcher:strategic"} <= {e["node"] for e in ledger}
    kinds = Counter(e["kind"] for e in web_log)
    assert kinds["search"] == sum(r["meta"]["searches"] for r in responses.values())
    assert kinds["fetch"] == sum(r["meta"]["fetches"] for r in responses.values())
    fetched_sources = [s for r in responses.values() for s in r["meta"]["sources_read"]]
    assert {s["url"] for s in fetched_sources} <= seen_urls

    again = run_recipe(external_recipe(tmp_path, "second"), progress=False)
    summary = json.loads(again.summary.read_text())
    assert summary["ledger"]["provider_calls"] == 0 and summary["ledger"]["cache_hits"] == summary["ledger"]["calls"] > 0
    first = {(r["system"], r["case_id"]): (r["response"], r["scores"]) for r in lines(folder.results) if r["status"] == "ok"}
    second = {(r["system"], r["case_id"]): (r["response"], r["scores"]) for r in lines(again.results) if r["status"] == "ok"}
    assert first == second and len(first) == 2


def test_external_options_are_typed_in_the_recipe(tmp_path):
    base = {"name": "x", "benchmark": {"name": "sample"}, "run": {"out_dir": str(tmp_path)}}
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.agent: .*open_deep_research"):
        parse_recipe({**base, "systems": [{"name": "a", "pipeline": "external", "memory": {"backend": "none"}, "pipeline_options": {"agent": "devin"}}]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.max_result: unknown key"):
        parse_recipe({**base, "systems": [{"name": "a", "pipeline": "external", "memory": {"backend": "none"},
                                           "pipeline_options": {"agent": "gpt_researcher", "max_result": 3}}]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.agent: unknown key"):
        parse_recipe({**base, "systems": [{"name": "a", "pipeline": "direct", "memory": {"backend": "none"}, "pipeline_options": {"agent": "x"}}]})


def test_the_external_agents_recipe_grids_deep_research_against_both_agents():
    path = Path("runs/recipes/external_agents.toml")
    import tomllib

    data = tomllib.loads(path.read_text())
    grid = {(s["pipeline"], s.get("pipeline_options", {}).get("agent"), s["memory"]["backend"]) for s in data["systems"]}
    assert grid == {(p, a, m) for p, a in (("deep_research", None), ("external", "open_deep_research"),
                                           ("external", "gpt_researcher")) for m in ("none", "full")}
    assert data["benchmark"]["name"] == "sample"
    assert len(load_recipe(path).systems) == 6
