"""Per-case cost of pipelines side by side: LLM calls, tokens and wall time on the same cases.

`atelier bench pipelines --pipeline deep_research --pipeline external:open_deep_research` runs
each pipeline (memory `none`, no judges) on the first N cases of a benchmark, as one run, and
reads the figures back from the run's ledger and results: what each system cost per case.
`external:<agent>` is the `external` pipeline with `pipeline_options.agent = <agent>`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from agents.ledger import read_ledger
from runs.recipe import parse_recipe
from runs.results import ResultsFile
from runs.runner import run_recipe


def system_for(pipeline: str, today: str | None) -> dict[str, Any]:
    """A recipe system for `pipeline` (`name` or `external:<agent>`), named after it."""
    name, _, agent = pipeline.partition(":")
    system: dict[str, Any] = {"name": pipeline.replace(":", "-"), "pipeline": name, "memory": {"backend": "none"}}
    if agent:
        system["pipeline_options"] = {"agent": agent, **({"today": today} if today else {})}
    return system


def bench_pipelines(
    pipelines: list[str],
    *,
    benchmark: str = "sample",
    limit: int = 2,
    model: str = "scripted",
    out_dir: Path,
    concurrency: int = 1,
    today: str | None = "2026-01-15",
) -> dict[str, Any]:
    recipe = parse_recipe({
        "name": "bench-pipelines",
        "benchmark": {"name": benchmark, "limit": limit},
        "models": {"system": {"model": model}},
        "systems": [system_for(p, today) for p in pipelines],
        "cache": {"enabled": False},  # every call reaches the model: the figures are the pipeline's own
        "run": {"out_dir": str(out_dir), "concurrency": concurrency},
    }, source="<bench pipelines>")
    folder = run_recipe(recipe, progress=False)
    ledger = read_ledger(folder.ledger) if folder.ledger.exists() else []
    per_case: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for entry in ledger:
        row = per_case[(entry.system or "", entry.case_id or "")]
        row["llm_calls"] += entry.kind != "embedding"
        row["embedding_calls"] += entry.kind == "embedding"
        row["prompt_tokens"] += entry.prompt_tokens
        row["completion_tokens"] += entry.completion_tokens
        row["model_latency_s"] += entry.latency_ms / 1000
    out: dict[str, Any] = {"benchmark": benchmark, "limit": limit, "model": model, "run": str(folder.path),
                           "pipelines": {}}
    records = ResultsFile(folder.results).load()
    for pipeline, system in zip(pipelines, recipe.systems):
        cases = []
        for record in sorted((r for r in records.values() if r.system == system.name), key=lambda r: r.case_id):
            figures = per_case.get((system.name, record.case_id), {})
            cases.append({"case": record.case_id, "status": record.status, "wall_s": round(record.latency_s, 3),
                          **{k: round(v, 3) if isinstance(v, float) and not v.is_integer() else int(v)
                             for k, v in figures.items()},
                          **({"error": record.error} if record.error else {})})
        ok = [c for c in cases if c["status"] == "ok"]
        out["pipelines"][pipeline] = {
            "cases": cases,
            "mean": {key: round(statistics.fmean(c.get(key, 0) for c in ok), 3)
                     for key in ("llm_calls", "prompt_tokens", "completion_tokens", "wall_s")} if ok else {},
            "failed": len(cases) - len(ok),
        }
    return out
