"""`atelier bench runner`: how close the runner comes to the ideal wall time, and what it costs.

N episodes of the sample suite's cases (repeated under new ids when N exceeds them) run through
the real runner — episode graph, SQLite checkpoints, results, ledger — on the scripted model with
a fixed latency per call and no response cache, so every call waits like a provider would:

- ideal wall time = critical path x episodes / concurrency, where an episode's critical path is
  its chain of model calls that could not overlap (counted from the ledger: calls whose time
  spans overlap ran in parallel) times the latency;
- wall time = from the first episode's start to the last one's end (setup and writing the
  summary and report are reported apart, as `total_s`);
- efficiency = ideal / wall;
- framework ms per LLM call = the process's CPU time over the episodes / model calls: everything
  that is not waiting on the model (LangGraph, checkpoints, gateway, litellm, the scripted model's
  own text composition);
- peak RSS, and checkpoint bytes per episode (checkpoints.sqlite on disk);
- `stack_floor` (runs/bench/stack_floor.py): what the stack itself costs on this machine before
  Atelier adds anything — litellm's own CPU per completion (`mock_response`: no model, no network,
  one of the episodes' prompts) and a bare one-node LangGraph graph (no checkpointer) — and the
  efficiency a single event loop could reach at that cost, `efficiency_bound` = min(1, critical
  path / (concurrency x floor per episode)), the floor per episode being the episode's LLM calls
  x litellm's cost + one graph invocation.
  The episodes share one process's CPU, so once concurrency x floor exceeds the critical path
  the loop, not the model, sets the pace.

`--executor ray [--ray-address ADDR]` runs the same episodes on a Ray cluster (runs/executors):
the clock starts once the cluster's episode workers are up (their start is part of `total_s`),
framework ms per call adds the workers' CPU time over their episodes to the driver's, and
`executor` says where the episodes ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agents.models.ledger import read_ledger
from benchmarks.case import Case
from benchmarks.registry import load_cases
from runs.bench.stack_floor import measure_stack_floor
from runs.recipe import parse_recipe
from runs.runner import Runner


class RunnerBenchSettings(BaseModel):
    cases: int = Field(default=250, ge=1)
    latency_ms: float = Field(default=100.0, ge=0)
    concurrency: int = Field(default=32, ge=1, le=256)
    pipeline: str = "direct"
    memory: str = "none"
    judges: list[str] = Field(default_factory=list, description="Judges run in each episode (none by default).")
    out_dir: Path | None = Field(default=None, description="Keep the run folder here (default: a temporary one).")
    executor: Literal["local", "ray"] = Field(default="local", description="Where the episodes run.")
    ray_address: str | None = Field(
        default=None,
        description="ray: the cluster (default: $RAY_ADDRESS, else a one-machine Ray started for the benchmark).",
    )


def bench_cases(n: int) -> list[Case]:
    """`n` cases of the sample suite, cycled under new ids (`q01#2`) when `n` exceeds it."""
    base = load_cases("sample", "all", "context")
    out = []
    for i in range(n):
        case = base[i % len(base)]
        round_ = i // len(base)
        out.append(case if round_ == 0 else case.model_copy(update={"id": f"{case.id}#{round_}"}))
    return out


def _critical_steps(intervals: list[tuple[float, float]]) -> int:
    """How many model calls of one episode ran one after another: overlapping calls count once."""
    steps, end = 0, float("-inf")
    for start, stop in sorted(intervals):
        if start >= end:
            steps += 1
            end = stop
        else:
            end = max(end, stop)
    return steps


class _TimedRunner(Runner):
    def __init__(self, *args: Any, cases: list[Case], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cases = cases
        self.first_start: float | None = None
        self.cpu_start: float | None = None
        self.episodes_end: float | None = None
        self.cpu_end: float | None = None
        self.executor: Any = None

    def load_cases(self) -> list[Case]:
        return self._cases

    @contextlib.asynccontextmanager
    async def _executor(self, graph):
        """The clock starts once the executor is ready (a cluster's workers up), as episodes begin."""
        async with super()._executor(graph) as executor:
            self.executor = executor
            self.first_start, self.cpu_start = time.perf_counter(), time.process_time()
            yield executor

    def finish(self, config: dict[str, Any], cases: list[Case] | None = None):
        self.episodes_end, self.cpu_end = time.perf_counter(), time.process_time()
        return super().finish(config, cases)


def _bench_recipe(settings: RunnerBenchSettings, out_dir: Path):
    model = {
        "model": f"scripted?latency_ms={settings.latency_ms:g}",
        "max_retries": 0,
        "max_concurrency": max(8, settings.concurrency * 8),
    }
    return parse_recipe(
        {
            "name": "bench-runner",
            "benchmark": {"name": "sample", "split": "all", "setting": "context"},
            "models": {"system": model, "judge": model},
            "systems": [{"name": "bench", "pipeline": settings.pipeline, "memory": {"backend": settings.memory}}],
            "judges": [{"name": name} for name in settings.judges],
            "run": {
                "concurrency": settings.concurrency,
                "out_dir": str(out_dir),
                "executor": settings.executor,
                "ray": {"address": settings.ray_address},
            },
            "cache": {"enabled": False},
        },
        source="<bench runner>",
    )


def efficiency_bound(
    critical_path_s: float, concurrency: int, calls_per_episode: float, floor: dict[str, float]
) -> float:
    """The efficiency one event loop can reach when each episode costs at least the stack's floor
    of CPU: episodes finish no faster than one per floor, and ideally `concurrency` per critical path."""
    per_episode_s = (
        calls_per_episode * floor["litellm_ms_per_call"] + floor["langgraph_ms_per_one_node_episode"]
    ) / 1000
    if per_episode_s <= 0 or critical_path_s <= 0:
        return 1.0
    return round(min(1.0, critical_path_s / (concurrency * per_episode_s)), 3)


def _measure(settings: RunnerBenchSettings, out_dir: Path) -> dict[str, Any]:
    import litellm  # noqa: F401 - imported before the clock starts: importing it takes seconds, once

    cases = bench_cases(settings.cases)
    floor = asyncio.run(measure_stack_floor(cases[0].view()))
    started = time.perf_counter()
    runner = _TimedRunner(_bench_recipe(settings, out_dir), out_dir / "run", progress=False, cases=cases)
    folder = asyncio.run(runner.run())
    total = time.perf_counter() - started

    ledger = read_ledger(folder.ledger) if folder.ledger.exists() else []
    latency = settings.latency_ms / 1000
    per_episode: dict[str, list[tuple[float, float]]] = {}
    for entry in ledger:
        # an entry is written when its call returns; the call began latency_ms (and a little) before
        per_episode.setdefault(entry.case_id or "", []).append((entry.ts - entry.latency_ms / 1000, entry.ts))
    steps = [_critical_steps(v) for v in per_episode.values()]
    critical = (sum(steps) / len(steps)) * latency if steps else 0.0
    ideal = critical * len(cases) / settings.concurrency
    wall = (runner.episodes_end or time.perf_counter()) - (runner.first_start or started)
    cpu = (runner.cpu_end or time.process_time()) - (runner.cpu_start or 0.0)
    workers = getattr(runner.executor, "worker_usage", [])  # ray: each worker's own episodes' CPU
    cpu += sum(w["episodes_cpu_s"] for w in workers)
    outcome = runner.outcome
    return {
        "benchmark": "runner",
        "cases": settings.cases,
        "latency_ms": settings.latency_ms,
        "concurrency": settings.concurrency,
        "pipeline": settings.pipeline,
        "memory": settings.memory,
        "judges": settings.judges,
        "episodes": {"scored": outcome.scored, "failed": outcome.failed, "unscored": outcome.unscored},
        "llm_calls": len(ledger),
        "critical_path_calls": round(sum(steps) / len(steps), 3) if steps else 0,
        "critical_path_s": round(critical, 4),
        "ideal_wall_s": round(ideal, 3),
        "wall_s": round(wall, 3),
        "efficiency": round(ideal / wall, 3) if wall > 0 else None,
        "total_s": round(total, 3),
        "framework_ms_per_call": round(cpu * 1000 / len(ledger), 3) if ledger else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "executor": {
            "name": settings.executor,
            **(
                {
                    "workers": len(workers),
                    "worker_peak_rss_mb": round(max(w["peak_rss_mb"] for w in workers), 1),
                    "episodes_per_node": dict(runner.executor.placed),
                }
                if workers
                else {}
            ),
        },
        "checkpoint_bytes_per_episode": round(folder.checkpoints.stat().st_size / len(cases)),
        "stack_floor": {
            **floor,
            "efficiency_bound": efficiency_bound(critical, settings.concurrency, len(ledger) / len(cases), floor),
        },
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def run_runner_benchmark(settings: RunnerBenchSettings) -> dict[str, Any]:
    if settings.out_dir is not None:
        settings.out_dir.mkdir(parents=True, exist_ok=True)
        return _measure(settings, settings.out_dir)
    with tempfile.TemporaryDirectory(prefix="atelier-bench-runner-") as tmp:
        return _measure(settings, Path(tmp))
