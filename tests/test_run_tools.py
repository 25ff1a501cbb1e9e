"""`atelier trace`, `compare` and `list` on real run folders of the tiny benchmark."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli import app
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.reading.compare import compare_runs
from atelier.runs.reading.trace import load_trace


def recipe(tmp_path, judge_model="scripted", systems=("none", "full")):
    return parse_recipe(
        {
            "name": "tools",
            "benchmark": {"name": "tiny"},
            "models": {"system": {"model": "scripted"}, "judge": {"model": judge_model}},
            "systems": [{"name": name, "memory": {"backend": name}} for name in systems],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


@pytest.fixture
def run_folder(tmp_path, cache_dir):
    return run_recipe(recipe(tmp_path), tmp_path / "run", progress=False)


def headers(output: str) -> list[str]:
    return re.findall(r"step (\d+)/(\d+) · ([^·]+) · ([^·]+) ·", output)


def test_trace_prints_every_step_with_state_changes_and_model_calls(run_folder):
    result = CliRunner().invoke(app, ["trace", str(run_folder.path), "tiny:0", "--system", "full", "--all"])
    assert result.exit_code == 0, result.output
    steps = headers(result.stdout)
    total = int(steps[0][1])
    assert [int(s[0]) for s in steps] == list(range(1, total + 1))
    ran = [(where.strip(), nodes.strip()) for _, _, where, nodes in steps]
    order = [
        ran.index(("episode", "prepare")),
        ran.index(("episode", "ingest")),
        ran.index(("episode", "recall")),
        ran.index(("episode", "direct")),
        ran.index(("episode › judge", "run_judge")),
    ]
    assert order == sorted(order)
    out = result.stdout
    assert "user_context:" in out and "I am vegetarian and allergic to soy." in out  # the recalled memory
    assert "system · scripted · text" in out and "Plan my meals for a training week." in out  # the prompt
    assert "answer: DRY RUN" in out  # the answer, from the response cache
    assert len(re.findall(r"judge · scripted · structured · \d+\+\d+ tokens · [\d.]+ ms", out)) == 2  # two aspects


def test_trace_steps_forwards_and_backwards_with_keys(run_folder):
    steps = load_trace(run_folder.path, "tiny:1", "none")
    keys = "nnpGq"
    result = CliRunner().invoke(
        app, ["trace", str(run_folder.path), "tiny:1", "--system", "none", "--interactive"], input=keys
    )
    assert result.exit_code == 0, result.output
    shown = [int(s[0]) for s in headers(result.stdout)]
    assert shown == [1, 2, 3, 2, len(steps)]


def test_trace_names_what_is_wrong(run_folder):
    with pytest.raises(ConfigError, match="name one with --system: none, full"):
        load_trace(run_folder.path, "tiny:0")
    with pytest.raises(ConfigError, match=r"no case 'tiny:9' in this run \(3 cases"):
        load_trace(run_folder.path, "tiny:9", "none")
    with pytest.raises(ConfigError, match="--system 'ful': not in this run"):
        load_trace(run_folder.path, "tiny:0", "ful")


def test_compare_sets_runs_side_by_side_with_paired_tests(tmp_path, cache_dir):
    a = run_recipe(recipe(tmp_path), tmp_path / "a", progress=False)
    b = run_recipe(recipe(tmp_path, judge_model="scripted?seed=3", systems=("full",)), tmp_path / "b", progress=False)
    comparison = compare_runs([a.path, b.path])
    assert [e["id"] for e in comparison["entries"]] == ["a:none", "a:full", "b:full"]
    assert comparison["baseline"] == "a:none"
    rows = comparison["comparisons"]
    assert [(r["entry"], r["n"]) for r in rows] == [("a:full", 3), ("b:full", 3)]
    summary_b = json.loads(b.summary.read_text())
    assert (
        comparison["entries"][2]["judges"]["lampqa_aspects"]["mean"]
        == summary_b["systems"]["full"]["judges"]["lampqa_aspects"]["mean"]
    )
    assert all(r["p_adjusted"] is not None and r["p_adjusted"] >= r["permutation_p"] for r in rows)

    page = tmp_path / "compare.html"
    result = CliRunner().invoke(app, ["compare", str(a.path), str(b.path), "--html", str(page), "--baseline", "b:full"])
    assert result.exit_code == 0, result.output
    assert "a:none" in result.stdout and "against b:full" in result.stdout
    html = page.read_text()
    assert html.count('<tr data-entry="a:') == 2 and 'id="comparisons"' in html  # a row per entry of run a
    with pytest.raises(ConfigError, match="--baseline 'c:x' is not one of: a:none, a:full, b:full"):
        compare_runs([a.path, b.path], baseline="c:x")


def test_list_shows_every_kind_with_typed_options():
    result = CliRunner().invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert set(listing) == {"pipelines", "memory", "judges", "benchmarks"}
    judges = {j["name"]: j for j in listing["judges"]}
    details = {o["name"]: o for o in judges["lampqa_aspects"]["options"]}["details"]
    assert details["default"] == "auto" and "narrative" in details["type"]
    retrieval = {m["name"]: m for m in listing["memory"]}["retrieval"]
    assert "method" in {o["name"] for o in retrieval["options"]} and retrieval["description"]
    tiny = {b["name"]: b for b in listing["benchmarks"]}["tiny"]
    assert tiny["settings"] == ["context", "task_only", "persona", "persona+context"] and tiny["default_split"] == "all"
    table = CliRunner().invoke(app, ["list", "benchmarks"])
    assert table.exit_code == 0 and "ikat" in table.stdout and "pipelines" not in table.stdout


def test_bench_runner_measures_efficiency_overhead_memory_and_checkpoints(tmp_path, cache_dir):
    from atelier.runs.bench.runner import RunnerBenchSettings, _critical_steps, efficiency_bound, run_runner_benchmark

    assert _critical_steps([(0, 1), (0.5, 1.5), (2, 3)]) == 2  # two overlapping calls, then one more
    floor = {"litellm_ms_per_call": 4.0, "langgraph_ms_per_one_node_episode": 1.0}
    # 32 episodes in flight each needing 5 ms of CPU: one loop serves 160 ms of work per 100 ms path
    assert efficiency_bound(0.1, 32, 1, floor) == 0.625
    assert efficiency_bound(0.1, 32, 2, floor) == pytest.approx(0.1 / (32 * 0.009), abs=1e-3)
    assert efficiency_bound(1.0, 2, 1, floor) == 1.0  # the loop keeps up: the model sets the pace
    result = run_runner_benchmark(
        RunnerBenchSettings(cases=30, latency_ms=50, concurrency=8, judges=["lampqa_aspects"], out_dir=tmp_path)
    )
    assert result["episodes"] == {"scored": 30, "failed": 0, "unscored": 0}
    # the answer, then the aspects judged in parallel; one episode's judge may first wait for the
    # judge model's structured mode to be found (one discovery per endpoint), a third step once
    assert 2 <= result["critical_path_calls"] <= 2 + 1 / 30 + 1e-9
    assert result["ideal_wall_s"] == pytest.approx(result["critical_path_calls"] * 0.05 * 30 / 8, rel=0.01)
    assert 0 < result["efficiency"] <= 1 and result["wall_s"] >= result["ideal_wall_s"]
    assert result["llm_calls"] > 30 and result["framework_ms_per_call"] > 0
    assert result["peak_rss_mb"] > 50 and 1_000 < result["checkpoint_bytes_per_episode"] < 100_000
    measured = result["stack_floor"]
    assert measured["litellm_ms_per_call"] > 0 and measured["langgraph_ms_per_one_node_episode"] > 0
    assert measured["efficiency_bound"] == pytest.approx(
        efficiency_bound(result["critical_path_s"], 8, result["llm_calls"] / 30, measured), abs=2e-3
    )
    kept = tmp_path / "run" / "results.jsonl"  # the run folder is kept where --out says
    assert len(kept.read_text().splitlines()) == 30
