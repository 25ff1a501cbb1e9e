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


async def test_rounds_set_each_rounds_framework_time_against_the_floor_measured_just_before_it(cache_dir, monkeypatch):
    import atelier.runs.bench.graph as graph_bench

    floors = iter([0.5, 2.0, 1.0])  # a floor per round, as the machine's load moves it
    measured: list[float] = []

    async def floor_now(benchmark: str) -> dict[str, float]:
        measured.append(next(floors))
        return {"litellm_ms_per_call": measured[-1], "langgraph_ms_per_one_node_episode": 0.3}

    monkeypatch.setattr(graph_bench, "_stack_floor", floor_now)
    given = {"litellm_ms_per_call": 99.0, "langgraph_ms_per_one_node_episode": 9.0}
    result = await graph_bench.bench_graph("rag", 0, cases=2, rounds=3, floor=given)  # a given floor is not used
    assert measured == [0.5, 2.0, 1.0]
    rounds = result["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert [r["litellm_ms_per_call"] for r in rounds] == measured
    for r in rounds:
        assert r["framework_ms_per_llm_call"] > 0
        assert r["framework_over_litellm_floor"] == pytest.approx(
            r["framework_ms_per_llm_call"] / r["litellm_ms_per_call"], abs=0.01
        )
        mine = [e for e in result["episodes"] if e["round"] == r["round"]]
        assert len(mine) == 2 and r["framework_ms_per_llm_call"] == pytest.approx(
            sum(e["framework_ms_per_llm_call"] for e in mine) / 2, abs=0.002
        )
    ratios = sorted(r["framework_over_litellm_floor"] for r in rounds)
    assert result["framework_over_litellm_floor"] == ratios[1]  # the median, not the mean
    assert result["framework_over_litellm_floor_range"] == [ratios[0], ratios[-1]]
    assert result["stack_floor"]["litellm_ms_per_call"] == 1.0  # the rounds' median floor
    assert len(result["episodes"]) == 6 and 1_000 < result["checkpoint_bytes_per_episode"] < 100_000

    one = await graph_bench.bench_graph("rag", 0, cases=1, floor=given)  # one round: the floor given, no rounds
    assert measured == [0.5, 2.0, 1.0] and one["stack_floor"] == given
    assert "rounds" not in one and "round" not in one["episodes"][0]
    assert one["framework_over_litellm_floor"] == pytest.approx(
        one["mean"]["framework_ms_per_llm_call"] / 99.0, abs=0.01
    )


def test_rounds_below_one_are_refused_by_name():
    done = subprocess.run(
        [str(Path(sys.executable).parent / "atelier"), "bench", "graph", "--pipeline", "rag", "--rounds", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and not done.stdout
    assert "Invalid value for '--rounds'" in done.stderr and "greater than or equal to 1" in done.stderr


async def test_pipelines_side_by_side_with_rounds_each_measure_the_floor_per_round_and_set_their_first_rounds(
    cache_dir, monkeypatch
):
    import atelier.runs.bench.graph as graph_bench

    measured: list[float] = []

    async def floor_now(benchmark: str) -> dict[str, float]:
        measured.append(0.5 + len(measured))
        return {"litellm_ms_per_call": measured[-1], "langgraph_ms_per_one_node_episode": 0.3}

    monkeypatch.setattr(graph_bench, "_stack_floor", floor_now)
    result = await graph_bench.compare_graphs(["rag", "direct"], 0, case_ids=["q13"], rounds=2)
    assert measured == [0.5, 1.5, 2.5, 3.5]  # two rounds for each pipeline, none measured for all first
    rag, direct = result["pipelines"]
    assert [r["litellm_ms_per_call"] for r in rag["rounds"]] == [0.5, 1.5]
    assert [r["litellm_ms_per_call"] for r in direct["rounds"]] == [2.5, 3.5]
    for figures in (rag, direct):
        [first] = [e for e in figures["episodes"] if e["round"] == 1]
        assert result["side_by_side"]["q13"][figures["pipeline"]]["wall_s"] == first["wall_s"]
    assert result["side_by_side"]["q13"]["rag"]["llm_calls"] == 2
    assert result["side_by_side"]["q13"]["direct"]["llm_calls"] == 1
