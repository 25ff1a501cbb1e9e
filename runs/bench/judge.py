"""`atelier bench judge`: what PQR's criteria reuse saves.

N systems' reports on the same P (task, persona) pairs are judged twice, all concurrently: with criteria
reuse (stages 1-2 generated once per pair and per task, shared through one artifact store, single
flight) and without (regenerated for every report, as if each system were judged alone). The response
cache is off, so every prompt token is a provider's; the figure is prompt tokens per judged report.
The reports are deterministic compositions of the case's own text (the scripted model's), of the
same length for both modes; they cite nothing, so R costs its claim extraction only.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from atelier.agents.answerer import answer_messages
from atelier.agents.judges.base import JudgeEnv, create_judge
from atelier.agents.judges.store import ArtifactStore
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.scripted import compose_text
from atelier.agents.models.settings import ModelSettings
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.registry import load_cases


def reports(cases: list[Case], systems: int) -> list[tuple[Case, SystemResponse]]:
    return [
        (
            case,
            SystemResponse(text=compose_text(answer_messages(case.view(), ""), seed=k, lead=f"Report of system {k}.")),
        )
        for case in cases
        for k in range(systems)
    ]


async def judge_all(
    judged: list[tuple[Case, SystemResponse]], model: ModelSettings, reuse: bool, concurrency: int, axes: list[str]
) -> dict[str, Any]:
    ledger = Ledger(None)
    gateway = Gateway({"judge": model, "system": model, "user_sim": model}, cache=None, ledger=ledger)
    with tempfile.TemporaryDirectory(prefix="atelier-bench-judge-") as directory:
        store = ArtifactStore([directory])
        judge = create_judge({"name": "pqr", "axes": axes, "reuse_criteria": reuse, "dedupe": "exact"})
        env = JudgeEnv(gateway=gateway, store=store)
        limit = asyncio.Semaphore(concurrency)

        async def one(case: Case, response: SystemResponse):
            async with limit:
                return await judge.judge(case, response, env)

        started = time.perf_counter()
        results = await asyncio.gather(*(one(case, response) for case, response in judged))
        seconds = time.perf_counter() - started
        stored = {
            kind.name.removeprefix("pqr_criteria_"): len(list(kind.glob("*.json")))
            for kind in sorted(Path(directory).iterdir())  # noqa: ASYNC240 (a benchmark's tally after the timed part)
        }
    calls = [e for e in ledger.entries if e.status == "ok"]
    criteria_calls = [e for e in calls if e.role == "pqr_criteria"]
    prompt_tokens = sum(e.prompt_tokens for e in calls)
    return {
        "reports": len(judged),
        "failed": sum(r.failed for r in results),
        "calls": len(calls),
        "prompt_tokens": prompt_tokens,
        "prompt_tokens_per_report": prompt_tokens / len(judged),
        "criteria_prompt_tokens_per_report": sum(e.prompt_tokens for e in criteria_calls) / len(judged),
        "criteria_calls": len(criteria_calls),
        # with reuse: the criteria sets in the store, per axis (P per (task, persona), Q per task);
        # without: every report generated its own
        "criteria_sets": stored if reuse else {a: len(judged) for a in axes if a in ("P", "Q")},
        "seconds": round(seconds, 3),
    }


async def bench_judge(
    *,
    pairs: int = 20,
    systems: int = 5,
    benchmark: str = "sample",
    setting: str | None = None,
    model: ModelSettings | None = None,
    concurrency: int = 16,
    axes: list[str] | None = None,
) -> dict[str, Any]:
    axes = axes or ["P", "Q", "R"]
    model = model or ModelSettings(model="scripted")
    cases = load_cases(benchmark, setting=setting, limit=pairs)
    judged = reports(cases, systems)
    reuse = await judge_all(judged, model, True, concurrency, axes)
    fresh = await judge_all(judged, model, False, concurrency, axes)
    return {
        "benchmark": benchmark,
        "pairs": len(cases),
        "tasks": len({c.query.text for c in cases}),
        "systems": systems,
        "axes": axes,
        "model": model.model,
        "with_reuse": reuse,
        "without_reuse": fresh,
        "reuse_ratio": reuse["prompt_tokens_per_report"] / fresh["prompt_tokens_per_report"],
    }
