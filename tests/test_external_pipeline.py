"""External deep-research agents through `atelier run`: open_deep_research and gpt-researcher on a
sample case, with the scripted model behind the gateway endpoint. Every LLM call they make is in
the ledger with its case and system, every search and fetch in web_log.jsonl, what they read in
the run's source store, nothing leaves the machine, and a second run of the same recipe makes no
provider call and gives the same results. `atelier bench graph` sets an agent beside deep_research.

The two runs are made once for the module (each agent episode starts a process that imports
the agent: seconds of CPU) and several tests read them."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.external import launcher
from atelier.graphs.sources import SourceStore
from atelier.runs.bench.graph import compare_graphs
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.layout import RunFolder
from atelier.runs.folder.recipe import load_recipe, parse_recipe

pytest.importorskip("open_deep_research")
pytest.importorskip("gpt_researcher")

ROOT = Path(__file__).resolve().parent.parent
AGENT_OF = {"odr-full": "open_deep_research", "gptr-full": "gpt_researcher", "odr-broken": "open_deep_research"}
# The scripted researcher's seed for open_deep_research: with it, its supervisor starts a research
# unit whose researcher calls `web_search` on the sample case (a seed that ends research at once
# would leave the search path untested; the assertions below say so if that ever happens).
RESEARCHER_SEED = 4


def external_recipe(tmp_path: Path, out: str):
    odr_settings = {"max_researcher_iterations": 2, "max_react_tool_calls": 2, "max_concurrent_research_units": 1}
    return parse_recipe(
        {
            "name": "external",
            "benchmark": {"name": "sample", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": "odr-full",
                    "pipeline": "external",
                    "memory": {"backend": "full"},
                    "models": {"researcher": {"model": f"scripted?seed={RESEARCHER_SEED}"}},
                    "pipeline_options": {
                        "agent": "open_deep_research",
                        "today": "2026-01-15",
                        "settings": odr_settings,
                    },
                },
                {
                    "name": "gptr-full",
                    "pipeline": "external",
                    "memory": {"backend": "full"},
                    "pipeline_options": {
                        "agent": "gpt_researcher",
                        "today": "2026-01-15",
                        "settings": {"MAX_ITERATIONS": 2, "MAX_SEARCH_RESULTS_PER_QUERY": 3, "TOTAL_WORDS": 300},
                    },
                },
                {
                    "name": "odr-broken",
                    "pipeline": "external",
                    "memory": {"backend": "none"},
                    "pipeline_options": {
                        "agent": "open_deep_research",
                        "settings": {"research_model": "no-such-provider:x"},
                    },
                },
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"dir": str(tmp_path / "llm")},
            "run": {"out_dir": str(tmp_path / out), "concurrency": 3},
        }
    )


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[RunFolder, RunFolder]:
    """The recipe run twice with one LLM cache: a first run, then its replay."""
    tmp = tmp_path_factory.mktemp("external")
    first = run_recipe(external_recipe(tmp, "first"), progress=False)
    second = run_recipe(external_recipe(tmp, "second"), progress=False)
    return first, second


def test_external_agents_run_through_the_gateway_endpoint_and_the_run_web(runs):
    folder, _ = runs
    results = {r["system"]: r for r in lines(folder.results)}
    assert results["odr-full"]["status"] == "ok" and results["gptr-full"]["status"] == "ok"
    responses = {name: results[name]["response"] for name in ("odr-full", "gptr-full")}
    for name, response in responses.items():  # the agent's work folder keeps it too, beside its log
        assert json.loads(next((folder.path / "external" / name).glob("*/response.json")).read_text()) == response
    ledger = lines(folder.ledger)
    web_log = lines(folder.path / "web_log.jsonl")
    seen_urls = {e["request"]["url"] for e in web_log if e["kind"] == "fetch"}
    store = SourceStore.for_run(str(folder.path))
    for name, response in responses.items():
        agent, meta = AGENT_OF[name], response["meta"]
        assert meta["refused"] == []  # the offline guard refused nothing: nothing tried to leave the machine
        assert meta["isolation"] == "namespaces"
        timings = json.loads(next((folder.path / "external" / name).glob("*/timings.json")).read_text())
        assert 0 < timings["startup_s"] < timings["wall_s"] < results[name]["latency_s"]
        mine = [e for e in ledger if e["system"] == name and e["node"].startswith(f"{agent}:")]
        # one ledger line per request the agent made (plus the gateway's own repair turns)
        assert Counter(e["node"].split(":", 1)[1] for e in mine if e["kind"] != "repair") == Counter(meta["calls"])
        assert all(e["case_id"] == results[name]["case_id"] and e["status"] == "ok" for e in mine)
        assert meta["searches"] > 0, f"{agent} never searched: the web path went untested"
        # citations are sources the agent was shown, by their citable URL (never the endpoint's page URL)
        assert all(
            c["source_id"].startswith("w-") and not c["url"].startswith("http://127.0.0.1")
            for c in response["citations"]
        )
        assert "http://127.0.0.1" not in response["text"] and "pages.atelier.invalid" not in response["text"]
        for source in meta["sources_read"]:  # every text the agent read is in the run's source store
            assert source["url"] in seen_urls and len(store.get(source["sha256"])) == source["chars"]
        read = {s["id"]: s["sha256"] for s in meta["sources_read"]}
        assert all(c["sha256"] == read[c["source_id"]] for c in response["citations"] if c["sha256"])
    assert responses["odr-full"]["meta"]["sources_read"], "open_deep_research read no page"
    assert {"open_deep_research:research", "open_deep_research:final_report"} <= {e["node"] for e in ledger}
    assert {"gpt_researcher:smart", "gpt_researcher:strategic"} <= {e["node"] for e in ledger}
    kinds = Counter(e["kind"] for e in web_log)
    assert kinds["search"] == sum(r["meta"]["searches"] for r in responses.values())
    assert kinds["fetch"] == sum(r["meta"]["fetches"] for r in responses.values())


def test_the_agents_ran_inside_their_boundary(runs):
    """By default (`isolation = "namespaces"`) each agent's server, and so every episode forked from
    it, runs inside `guard.py --namespaces` (tests/test_agent_isolation.py tries the ways out of it)."""
    prefix = launcher.boundary_command()
    bounded = {
        agent
        for (_, agent, isolated), server in launcher._servers.items()
        if isolated and list(server.process.args[: len(prefix)]) == prefix
    }
    assert {"open_deep_research", "gpt_researcher"} <= bounded


def test_a_failing_agent_fails_its_episode_with_the_agents_reason(runs):
    folder, _ = runs
    broken = {r["system"]: r for r in lines(folder.results)}["odr-broken"]
    assert broken["status"] == "error" and "open_deep_research failed" in broken["error"]
    assert "no-such-provider" in broken["error"] and "agent.log" in broken["error"]


def test_a_second_run_of_the_recipe_replays_from_the_cache(runs):
    first, second = runs
    summary = json.loads(second.summary.read_text())
    assert (
        summary["ledger"]["provider_calls"] == 0 and summary["ledger"]["cache_hits"] == summary["ledger"]["calls"] > 0
    )
    ok = lambda folder: {
        (r["system"], r["case_id"]): (r["response"], r["scores"]) for r in lines(folder.results) if r["status"] == "ok"
    }
    assert ok(first) == ok(second) and len(ok(first)) == 2


async def test_bench_graph_sets_an_external_agent_beside_deep_research_on_the_same_cases(cache_dir):
    # what `atelier bench graph --pipeline deep_research --pipeline external:open_deep_research --case q13` prints
    result = await compare_graphs(["deep_research", "external:open_deep_research"], 0, case_ids=["q13"])
    assert result["cases"] == ["q13"] and [r["pipeline"] for r in result["pipelines"]] == [
        "deep_research",
        "external:open_deep_research",
    ]
    assert result["pipelines"][1]["options"] == {"agent": "open_deep_research"}
    mine = result["side_by_side"]["q13"]["external:open_deep_research"]
    [episode] = result["pipelines"][1]["episodes"]
    assert mine == {k: episode[k] for k in mine} and episode["case_id"] == "q13"
    assert episode["llm_calls"] >= 2 and episode["prompt_tokens"] > episode["completion_tokens"] > 0
    assert 0 < episode["startup_s"] < episode["wall_s"]
    ours = result["side_by_side"]["q13"]["deep_research"]
    assert ours["llm_calls"] >= ours["critical_path_calls"] > 0 and "startup_s" not in ours


def test_external_options_are_typed_in_the_recipe(tmp_path):
    base = {"name": "x", "benchmark": {"name": "sample"}, "run": {"out_dir": str(tmp_path)}}
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.agent: .*open_deep_research"):
        parse_recipe(
            {
                **base,
                "systems": [
                    {
                        "name": "a",
                        "pipeline": "external",
                        "memory": {"backend": "none"},
                        "pipeline_options": {"agent": "devin"},
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.max_result: unknown key"):
        parse_recipe(
            {
                **base,
                "systems": [
                    {
                        "name": "a",
                        "pipeline": "external",
                        "memory": {"backend": "none"},
                        "pipeline_options": {"agent": "gpt_researcher", "max_result": 3},
                    }
                ],
            }
        )
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline_options\.agent: unknown key"):
        parse_recipe(
            {
                **base,
                "systems": [
                    {
                        "name": "a",
                        "pipeline": "direct",
                        "memory": {"backend": "none"},
                        "pipeline_options": {"agent": "x"},
                    }
                ],
            }
        )


def test_a_system_whose_agent_cannot_start_is_refused_before_any_episode(tmp_path):
    recipe = parse_recipe(
        {
            "name": "x",
            "benchmark": {"name": "sample", "limit": 1},
            "run": {"out_dir": str(tmp_path)},
            "systems": [
                {"name": "direct-none", "pipeline": "direct", "memory": {"backend": "none"}},
                {
                    "name": "elsewhere",
                    "pipeline": "external",
                    "memory": {"backend": "none"},
                    "pipeline_options": {"agent": "gpt_researcher", "python": str(tmp_path / "no-python")},
                },
            ],
        }
    )
    with pytest.raises(ConfigError, match=r"systems\[1\] \(elsewhere\): pipeline_options\.python: .*no-python is not"):
        run_recipe(recipe, progress=False)
    assert not list(tmp_path.glob("*/results.jsonl"))  # no episode ran


def test_the_external_agents_recipe_grids_deep_research_against_both_agents():
    path = ROOT / "runs" / "recipes" / "external_agents.toml"
    data = tomllib.loads(path.read_text())
    grid = {
        (s["pipeline"], s.get("pipeline_options", {}).get("agent"), s["memory"]["backend"]) for s in data["systems"]
    }
    assert grid == {
        (p, a, m)
        for p, a in (("deep_research", None), ("external", "open_deep_research"), ("external", "gpt_researcher"))
        for m in ("none", "full")
    }
    assert data["benchmark"]["name"] == "sample"
    assert len(load_recipe(path).systems) == 6
