"""`atelier bench graph` prints JSON: framework time per LLM call and, for deep_research, wall time
against the critical path — which must show its researchers working in parallel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from atelier.runs.bench.graph import covered_seconds

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> dict:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "atelier"), "bench", "graph", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_covered_seconds_is_the_length_of_the_union():
    assert covered_seconds([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == 3.0
    assert covered_seconds([]) == 0.0


@pytest.mark.battery
def test_bench_graph_reports_framework_time_per_llm_call(cache_dir):
    result = bench("--pipeline", "rag", "--latency-ms", "0", "--cases", "2")
    assert result["pipeline"] == "rag" and result["checkpointer"] == "sqlite" and len(result["episodes"]) == 2
    for episode in result["episodes"]:
        assert episode["llm_calls"] == 2 and episode["critical_path_calls"] == 2
        assert 0 <= episode["in_model_calls_s"] <= episode["wall_s"]
        assert episode["framework_ms_per_llm_call"] > 0
    assert result["machine"]["cores"] >= 1 and len(result["load_average"]) == 3
    assert 1_000 < result["checkpoint_bytes_per_episode"] < 100_000  # the timed episodes' own file
    floor = result["stack_floor"]  # the libraries' own share, measured beside ours
    assert floor["litellm_ms_per_call"] > 0 and floor["langgraph_ms_per_one_node_episode"] > 0
    ratio = result["mean"]["framework_ms_per_llm_call"] / floor["litellm_ms_per_call"]
    assert result["framework_over_litellm_floor"] == pytest.approx(ratio, abs=0.01)


@pytest.mark.battery
def test_deep_research_researchers_overlap_so_wall_time_follows_the_critical_path(cache_dir):
    latency = 100
    result = bench("--pipeline", "deep_research", "--latency-ms", str(latency), "--case", "q14")
    [episode] = result["episodes"]
    assert episode["llm_calls"] >= 2 * episode["critical_path_calls"]  # many calls ran side by side
    assert episode["wall_s"] >= episode["critical_path_s"]  # the critical path is not overstated
    serial = episode["llm_calls"] * latency / 1000
    assert episode["wall_s"] < 0.75 * serial  # researchers' calls overlap instead of queueing
