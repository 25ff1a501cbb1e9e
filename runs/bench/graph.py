"""`atelier bench graph`: what a pipeline's graph costs around its model calls.

Each episode runs the pipeline graph alone, as a run would (an SQLite checkpointer, the run's web,
the ledger, its case remembered by reference as the episode's `prepare` step remembers it), on the scripted model with a fixed latency per call, the response cache off (every
call reaches the model) and the web recorded by a warm-up pass (so the figures are not those of
starting the sandbox or spawning extraction workers). Per episode:

- `framework_ms_per_llm_call`: the wall time during which no model call was in flight, per LLM
  call: (wall - time covered by model calls) / calls, a call spanning what the gateway's ledger
  times (the provider client, litellm, and the model). It is everything the framework adds — graph
  steps, checkpoints, the gateway's bookkeeping, memory recall, the web cache and page
  extraction — divided over the calls. `client_ms_per_llm_call` is the share of a call's time that
  is not the model's latency (litellm's own work, per call).
- `checkpoint_bytes_per_episode`: the timed episodes' checkpoints.sqlite (a file of their own, pending
  writes of finished episodes dropped as in runs) over the episodes: the storage a run keeps per
  episode for this pipeline alone (`atelier bench runner` measures it for the whole episode graph).
- `critical_path_s`: the longest chain of dependent LLM calls (`response.meta["critical_path_calls"]`,
  counted by the pipeline as it runs: parallel calls count once) times the latency;
  `wall_over_critical_path` = wall / critical path shows whether parallel work really overlaps.
- `prompt_tokens`, `completion_tokens` (as the ledger counts them) and `embedding_calls` (not LLM calls).
- `stack_floor` (runs/bench/stack_floor.py): litellm's own CPU per completion and a bare one-node
  LangGraph invocation on this machine, the libraries' share that no change of ours can remove
  (with a litellm callback registered, litellm's success logging runs after the call returns, so
  part of it lands in the framework figure; with none, the gateway skips it).
- `framework_over_litellm_floor`: the mean framework time per call over litellm's floor, the measure
  of the target (at most 1.5 at latency 0). Twelve episodes are 24 calls, and one run's figure moves
  by a fifth with the machine: compare commits by the median of interleaved runs. With `--rounds N`
  the cases are timed N times, each round right after its own measure of the floor (a floor taken
  seconds before a round sees the load the round sees); the figure is then the median of the
  rounds' ratios, `rounds` lists each and `framework_over_litellm_floor_range` their spread.

Several pipelines (`compare_graphs`) run one after the other on the same cases, and their figures
are also set side by side per case. A pipeline is named as in a recipe, or as
`<pipeline>:<variant>` (`external:open_deep_research`). An external agent's wall time includes
starting its process (`startup_s`: a fork of the preloaded agent server, whose imports the
warm-up pass paid for), which counts as framework time; it reports no critical path, so all its
calls count as one chain.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.registry import load_cases
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.heap import settled_heap
from atelier.graphs.inputs import forget_cases, remember_cases
from atelier.graphs.pipelines import PIPELINES, pipeline_options, pipeline_variant
from atelier.graphs.resources import release, resources_for
from atelier.runs.bench.stack_floor import measure_stack_floor
from atelier.tools.config import WebConfig


def _context(
    run_dir: Path, name: str, pipeline: str, latency_ms: float, memory: str, options: dict[str, Any], web: WebConfig
) -> EpisodeContext:
    model = ModelSettings(model=f"scripted?latency_ms={latency_ms:g}", max_concurrency=256, max_retries=0)
    return EpisodeContext(
        run_id="bench-graph",
        run_dir=str(run_dir),
        cache_dir=None,
        models={"system": model, "judge": model, "user_sim": model},
        system=SystemSpec(
            name=f"bench-{name.replace(':', '-')}",
            pipeline=pipeline,
            memory={"backend": memory},
            pipeline_options=options,
        ),
        judges=[],
        web=web,
        clarify_answerer="none",
    )


def covered_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


async def _episodes(
    graph, context: EpisodeContext, case_ids: list[str], benchmark: str, latency_ms: float, thread_prefix: str
) -> list[dict[str, Any]]:
    ledger = resources_for(context).gateway.ledger
    figures = PIPELINES.get(context.system.pipeline).bench_figures
    out = []
    for case_id in case_ids:
        before = len(ledger.entries)
        config = {"configurable": {"thread_id": f"{thread_prefix}:{case_id}"}}
        started = time.perf_counter()
        result = await graph.ainvoke({"benchmark": benchmark, "case_id": case_id}, config, context=context)
        wall = time.perf_counter() - started
        entries = [e for e in ledger.entries[before:] if e.kind != "embedding"]
        embeddings = len(ledger.entries) - before - len(entries)
        calls = len(entries)
        in_model = covered_seconds([(e.ts - e.latency_ms / 1000, e.ts) for e in entries])
        chain = int(result["response"].meta.get("critical_path_calls", calls))
        critical = chain * latency_ms / 1000
        out.append(
            {
                "case_id": case_id,
                "wall_s": round(wall, 4),
                "llm_calls": calls,
                "prompt_tokens": sum(e.prompt_tokens for e in entries),
                "completion_tokens": sum(e.completion_tokens for e in entries),
                "embedding_calls": embeddings,
                "in_model_calls_s": round(in_model, 4),
                "framework_ms_per_llm_call": round((wall - in_model) * 1000 / max(calls, 1), 3),
                "client_ms_per_llm_call": round(statistics.fmean(e.latency_ms for e in entries) - latency_ms, 3)
                if entries
                else None,
                **(figures(context, case_id) if figures else {}),
                "critical_path_calls": chain,
                "critical_path_s": round(critical, 4),
                "wall_over_critical_path": round(wall / critical, 3) if critical else None,
            }
        )
    return out


@contextlib.asynccontextmanager
async def _checkpointer(kind: str, path: Path):
    from atelier.graphs.persistence import run_checkpointer
    from atelier.graphs.serde import serializer

    if kind == "sqlite":
        no_follow.make_folders(path.parent)
        async with run_checkpointer(path.parent) as saver:  # what runs use: <folder>/checkpoints.sqlite
            yield saver
    elif kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver(serde=serializer())
    else:
        yield None


async def _stack_floor(benchmark: str) -> dict[str, float]:
    """The stack's floor, for a prompt the size of this benchmark's direct answers."""
    return await measure_stack_floor(load_cases(benchmark, limit=1)[0].view())


MEANS = (
    "wall_s",
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "framework_ms_per_llm_call",
    "client_ms_per_llm_call",
    "critical_path_calls",
    "wall_over_critical_path",
)
SIDE_BY_SIDE = ("wall_s", "llm_calls", "prompt_tokens", "completion_tokens", "critical_path_calls")


async def bench_graph(
    pipeline: str,
    latency_ms: float,
    *,
    cases: int = 3,
    case_ids: list[str] | None = None,
    benchmark: str = "sample",
    memory: str = "none",
    options: dict[str, Any] | None = None,
    checkpointer: str = "sqlite",
    floor: dict[str, float] | None = None,
    rounds: int = 1,
) -> dict[str, Any]:
    """Times `cases` cases of `benchmark` (or those named by `case_ids`). `pipeline` may name a
    variant (`external:open_deep_research`). `checkpointer`: "sqlite" (what runs use), "memory" or
    "none" (to see what checkpoints cost). `floor`: the stack's floor when the caller measured it already.
    `rounds` > 1 times the cases that many times, each round into a checkpoint file of its own and
    right after its own measure of the floor (`floor` is not used), so that each round's ratio sets
    two figures taken under the same load; the ratio printed is then the median of the rounds'
    (`rounds` lists each). The rounds share the run's resources (its gateway, web and source store),
    as the timed episodes share the warm-up's."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    name = pipeline
    pipeline, variant = pipeline_variant(name)
    options = {
        **pipeline_options(pipeline, {**(options or {}), **variant}).model_dump(exclude_defaults=True),
        **variant,
    }
    loaded = load_cases(benchmark) if case_ids else load_cases(benchmark, limit=cases)
    case_ids = case_ids or [c.id for c in loaded]
    floor = (floor or await _stack_floor(benchmark)) if rounds == 1 else None  # else: each round measures its own
    floors: list[dict[str, float]] = []
    episodes: list[dict[str, Any]] = []
    per_round: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="atelier-bench-graph-") as tmp:
        root = Path(tmp)
        web = WebConfig(cache_dir=root / "web", mode="record")
        warm = _context(root, name, pipeline, 0, memory, options, web)
        timed = _context(root, name, pipeline, latency_ms, memory, options, web)
        built = PIPELINES.get(pipeline).build()
        stored_bytes: int | None = None
        # as an episode's `prepare` step does in a run: the pipeline finds its case by reference
        remember_cases(warm.run_id, [c for c in loaded if c.id in set(case_ids)])
        try:
            async with _checkpointer(checkpointer, root / "warm-up" / "checkpoints.sqlite") as saver:
                await _episodes(built.copy(update={"checkpointer": saver}), warm, case_ids, benchmark, 0, "warm-up")
            for number in range(1, rounds + 1):
                floors.append(floor or await _stack_floor(benchmark))
                stored = root / ("timed" if rounds == 1 else f"timed-{number}") / "checkpoints.sqlite"
                async with _checkpointer(checkpointer, stored) as saver:  # a fresh file: what a run keeps per episode
                    with settled_heap():  # as the runner's episodes run
                        timed_episodes = await _episodes(
                            built.copy(update={"checkpointer": saver}), timed, case_ids, benchmark, latency_ms, "timed"
                        )
                    if hasattr(saver, "drop_pending_writes"):  # as the runner does once an episode is done
                        for case_id in case_ids:
                            saver.drop_pending_writes(f"timed:{case_id}")
                if stored_bytes is None and stored.exists():
                    stored_bytes = stored.stat().st_size
                framework = _mean(timed_episodes, "framework_ms_per_llm_call")
                per_round.append(
                    {
                        "round": number,
                        "framework_ms_per_llm_call": framework,
                        "litellm_ms_per_call": floors[-1]["litellm_ms_per_call"],
                        "framework_over_litellm_floor": _over_floor(framework, floors[-1]),
                    }
                )
                episodes += [{**e, "round": number} for e in timed_episodes] if rounds > 1 else timed_episodes
        finally:
            await release(warm)
            await release(timed)
            forget_cases(warm.run_id)

    ratios = [r["framework_over_litellm_floor"] for r in per_round if r["framework_over_litellm_floor"] is not None]
    return {
        "pipeline": name,
        "latency_ms": latency_ms,
        "benchmark": benchmark,
        "memory": memory,
        "checkpointer": checkpointer,
        "options": options,
        "episodes": episodes,
        "checkpoint_bytes_per_episode": round(stored_bytes / len(case_ids)) if stored_bytes else None,
        "mean": {key: _mean(episodes, key) for key in MEANS},
        "stack_floor": {
            key: round(statistics.median(f[key] for f in floors), 3) for key in floors[0]
        },  # rounds' median
        # what the framework adds per call against what litellm alone costs: the target's measure
        "framework_over_litellm_floor": round(statistics.median(ratios), 2) if ratios else None,
        **(
            {"rounds": per_round, "framework_over_litellm_floor_range": [min(ratios), max(ratios)] if ratios else None}
            if rounds > 1
            else {}
        ),
        "targets": {
            "framework_over_litellm_floor": "<= 1.5 at latency 0 (rag; one round moves +-20%: use --rounds, or "
            "compare medians of interleaved runs)",
            "wall_over_critical_path": "<= 1.2 for deep_research at 100 ms",
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _mean(episodes: list[dict[str, Any]], key: str) -> float | None:
    values = [e[key] for e in episodes if e[key] is not None]
    return round(statistics.fmean(values), 3) if values else None


def _over_floor(framework: float | None, floor: dict[str, float]) -> float | None:
    return (
        round(framework / floor["litellm_ms_per_call"], 2)
        if framework is not None and floor.get("litellm_ms_per_call")
        else None
    )


async def compare_graphs(
    pipelines: list[str],
    latency_ms: float,
    *,
    cases: int = 3,
    case_ids: list[str] | None = None,
    benchmark: str = "sample",
    **kwargs: Any,
) -> dict[str, Any]:
    """`bench_graph` for each of `pipelines` on the same cases, and per case their figures side by side."""
    case_ids = case_ids or [c.id for c in load_cases(benchmark, limit=cases)]
    # the machine's, not a pipeline's: measured once (with rounds, before each round of each pipeline)
    floor = await _stack_floor(benchmark) if kwargs.get("rounds", 1) == 1 else None
    results = [
        await bench_graph(p, latency_ms, case_ids=case_ids, benchmark=benchmark, floor=floor, **kwargs)
        for p in pipelines
    ]
    side_by_side = {
        case_id: {
            r["pipeline"]: {k: e[k] for k in (*SIDE_BY_SIDE, "startup_s") if k in e}
            for r in results
            for e in r["episodes"]
            if e["case_id"] == case_id and e.get("round", 1) == 1  # with --rounds: the first round's
        }
        for case_id in case_ids
    }
    return {"cases": case_ids, "side_by_side": side_by_side, "pipelines": results}
