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

`--rpm R` asks a provider with a rate limit instead (`runs.bench.rate_limited_provider`): an
OpenAI-compatible server on loopback, reached through litellm's real HTTP path, that answers after
`--latency-ms` and admits at most R requests per minute as a smooth rate, answering 429 with
`Retry-After` past it; the run's own model setting has `rpm = R`, as a user would set it. The
question is whether the runner keeps that limit busy without a storm of 429s:

- `limit_efficiency` = successful calls per second over the limit's R/60, measured over the run's
  requests at the provider: from the first request's arrival to the last successful one's, plus
  one interval 60/R (n requests spaced exactly 60/R apart score 1.0); the same over the episodes'
  whole wall time, which also holds the start and the last answer's latency, is
  `limit_efficiency_over_wall`;
- `rate_limited_share` = the share of the run's requests the provider answered 429;
- `retries_before_retry_after`: retries (a request sent again after its 429) that came sooner than
  the provider's Retry-After said — 0 when the gateway honours it.
The run skips its preflight (the probe of the provider is no part of what is measured).

Both ways report `process_cpu_share` (the process's CPU time over the episodes' wall time, of one
core) and `loop_lag_ms` (p50 / p95 / max of how late the event loop woke a task sleeping 20 ms):
when the loop wakes late, every request is sent late, and on a shared machine that is the floor. Without `--rpm` (the 100 ms / concurrency 32
figure) the efficiency against the ideal wall time is information, with no target.

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

from atelier.agents.models.ledger import read_ledger
from atelier.benchmarks.case import Case
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.registry import load_cases
from atelier.runs.bench.rate_limited_provider import RateLimitedProvider, Request
from atelier.runs.bench.stack_floor import measure_stack_floor
from atelier.runs.execution.runner import Runner
from atelier.runs.folder.recipe import parse_recipe


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
    rpm: int | None = Field(
        default=None,
        gt=0,
        description="Ask a provider that admits at most this many requests per minute (and set the run's rpm so).",
    )


def bench_cases(n: int, distinct: bool = False) -> list[Case]:
    """`n` cases of the sample suite, cycled under new ids (`q01#2`) when `n` exceeds it. `distinct`:
    a repeated case's query says which round it is, so no two episodes send the same request (a
    provider's log then tells a retry, the same request again, from another episode's)."""
    base = load_cases("sample", "all", "context")
    out = []
    for i in range(n):
        case = base[i % len(base)]
        round_ = i // len(base)
        if round_ == 0:
            out.append(case)
            continue
        update: dict[str, Any] = {"id": f"{case.id}#{round_}"}
        if distinct:
            update["query"] = case.query.model_copy(update={"text": f"{case.query.text} (round {round_})"})
        out.append(case.model_copy(update=update))
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
        self.first_start_wall: float | None = None  # time.time(), to compare with a provider's clock
        self.episodes_end_wall: float | None = None
        self.loop_lags: list[float] = []
        self.executor: Any = None

    def load_cases(self) -> list[Case]:
        return self._cases

    @contextlib.asynccontextmanager
    async def _executor(self, graph):
        """The clock starts once the executor is ready (a cluster's workers up), as episodes begin."""
        async with super()._executor(graph) as executor:
            self.executor = executor
            self.first_start, self.cpu_start = time.perf_counter(), time.process_time()
            self.first_start_wall = time.time()
            watcher = asyncio.create_task(_watch_loop(self.loop_lags))
            try:
                yield executor
            finally:
                watcher.cancel()

    def finish(self, config: dict[str, Any], cases: list[Case] | None = None):
        self.episodes_end, self.cpu_end = time.perf_counter(), time.process_time()
        self.episodes_end_wall = time.time()
        return super().finish(config, cases)


PROVIDER_KEY = "sk-rate-limited-provider-no-key"  # the loopback provider checks none; litellm wants one


LAG_PROBE_S = 0.02


async def _warm_up(api_base: str) -> None:
    """One call to the provider before the clock starts, as `import litellm` is made before it: the
    first call on litellm's OpenAI path imports and builds what it needs, seconds of a stopped event
    loop a run pays once (a run's preflight pays it too), not the runner's steady rate."""
    from atelier.agents.models.gateway import Gateway
    from atelier.agents.models.settings import ModelSettings

    settings = ModelSettings(model="openai/rate-limited", api_base=api_base, api_key=PROVIDER_KEY)
    await Gateway({"system": settings}).text("system", [{"role": "user", "content": "Warm up."}])


async def _watch_loop(lags: list[float]) -> None:
    """How late the event loop wakes a task that sleeps LAG_PROBE_S, again and again: the time every
    task of the run waits for the CPU (the process's own work, and on a shared machine others')."""
    while True:
        started = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_S)
        lags.append(time.perf_counter() - started - LAG_PROBE_S)


def _lag_figures(lags: list[float]) -> dict[str, float] | None:
    if not lags:
        return None
    ordered = sorted(lags)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"p50": at(0.5), "p95": at(0.95), "max": round(ordered[-1] * 1000, 1)}


def _bench_recipe(settings: RunnerBenchSettings, out_dir: Path, api_base: str | None = None):
    model: dict[str, Any] = {
        "model": f"scripted?latency_ms={settings.latency_ms:g}",
        "max_retries": 0,
        "max_concurrency": max(8, settings.concurrency * 8),
    }
    if settings.rpm is not None:  # a provider with a limit, and the run's own rpm as a user sets it
        model = {
            "model": "openai/rate-limited",
            "api_base": api_base,
            "api_key": PROVIDER_KEY,
            "rpm": settings.rpm,
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

    cases = bench_cases(settings.cases, distinct=settings.rpm is not None)
    floor = asyncio.run(measure_stack_floor(cases[0].view()))
    provider = RateLimitedProvider(settings.rpm, settings.latency_ms) if settings.rpm is not None else None
    with provider or contextlib.nullcontext():
        if provider is not None:
            asyncio.run(_warm_up(provider.base_url))
        started = time.perf_counter()
        recipe = _bench_recipe(settings, out_dir, provider.base_url if provider is not None else None)
        # the provider's preflight probe (its first calls pay litellm's warm-up) is no part of what
        # is measured, and on a loaded machine outlasts the probe's 7 s: the episodes alone are run
        runner = _TimedRunner(recipe, out_dir / "run", progress=False, cases=cases, preflight=provider is None)
        folder = asyncio.run(runner.run())
        total = time.perf_counter() - started
        requests = provider.requests() if provider is not None else []

    ledger = read_ledger(folder.ledger) if folder.ledger.exists() else []
    latency = settings.latency_ms / 1000
    per_episode: dict[str, list[tuple[float, float]]] = {}
    for entry in ledger:
        # an entry is written when its call returns; the call began latency_ms (and a little) before
        per_episode.setdefault(entry.case_id or "", []).append((entry.ts - entry.latency_ms / 1000, entry.ts))
    steps = [_critical_steps(v) for v in per_episode.values()]
    critical = (sum(steps) / len(steps)) * latency if steps else 0.0
    ideal = critical * len(cases) / settings.concurrency
    if settings.rpm is not None:  # no run asks faster than its limit
        ideal = max(ideal, len(ledger) * 60 / settings.rpm)
    wall = (runner.episodes_end or time.perf_counter()) - (runner.first_start or started)
    cpu = (runner.cpu_end or time.process_time()) - (runner.cpu_start or 0.0)
    workers = getattr(runner.executor, "worker_usage", [])  # ray: each worker's own episodes' CPU
    cpu += sum(w["episodes_cpu_s"] for w in workers)
    outcome = runner.outcome
    assert outcome is not None  # run() ends by finishing the run
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
        "process_cpu_share": round(cpu / wall, 3) if wall > 0 else None,  # of one core, over the episodes
        "loop_lag_ms": _lag_figures(runner.loop_lags),
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
        **(
            rate_limit_figures(
                requests,
                settings.rpm,
                start=runner.first_start_wall or 0.0,
                end=runner.episodes_end_wall or time.time(),
                wall_s=wall,
            )
            if settings.rpm is not None
            else {}
        ),
    }


def rate_limit_figures(requests: list[Request], rpm: int, *, start: float, end: float, wall_s: float) -> dict[str, Any]:
    """How well a run used a provider's limit of `rpm`, from the provider's log of the requests that
    arrived between `start` and `end` (wall clock): see the module's docstring."""
    mine = sorted((r for r in requests if start <= r.at <= end), key=lambda r: r.at)
    ok = [r for r in mine if r.status == 200]
    limited = [r for r in mine if r.status == 429]
    interval = 60 / rpm
    window = (ok[-1].at - mine[0].at + interval) if ok else None
    retried = early = 0
    for i, refused in enumerate(mine):
        if refused.status != 429:
            continue
        again = next((r for r in mine[i + 1 :] if r.body == refused.body), None)  # its retry: the same body
        if again is None:
            continue
        retried += 1
        if again.at < refused.at + (refused.retry_after_s or 0.0) - 0.005:  # 5 ms: the two clocks' rounding
            early += 1
    return {
        "rpm": rpm,
        "limit_calls_per_s": round(rpm / 60, 3),
        "requests": len(mine),
        "successful_requests": len(ok),
        "rate_limited_requests": len(limited),
        "window_s": round(window, 3) if window is not None else None,
        "calls_per_s": round(len(ok) / window, 3) if window else None,
        "limit_efficiency": round(len(ok) * interval / window, 3) if window else None,
        "limit_efficiency_over_wall": round(len(ok) * interval / wall_s, 3) if wall_s > 0 else None,
        "rate_limited_share": round(len(limited) / len(mine), 4) if mine else None,
        "retries_after_429": retried,
        "retries_before_retry_after": early,
    }


def run_runner_benchmark(settings: RunnerBenchSettings) -> dict[str, Any]:
    if settings.out_dir is not None:
        no_follow.make_folders(settings.out_dir)
        return _measure(settings, settings.out_dir)
    with tempfile.TemporaryDirectory(prefix="atelier-bench-runner-") as tmp:
        return _measure(settings, Path(tmp))
