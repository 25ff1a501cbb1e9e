"""`atelier simulate feedback`: a run's responses rated by the simulated users who asked for them.

For every finished (case, system) of a run, the case's simulated user (its persona and hidden
need; role `user_sim`) scores the response 1–5 with diagnostic feedback on BESPOKE's four criteria.
Each rating becomes four response–judgment pairs, written as JSON Lines that a later recipe adds to
its cases' gold with `[benchmark] rj_pairs_file` — BESPOKE judge shots for benchmarks without human
R-J pairs (rate one run's systems, judge another's with them).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError, answers_whole
from atelier.agents.models.ledger import Ledger, call_tags
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim import rate_response
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.data_files import cache_dir
from atelier.runs.execution.preflight import check_models
from atelier.runs.folder.recipe import Recipe
from atelier.runs.folder.results import ResultsFile


def _run_recipe(run_dir: Path) -> Recipe:
    config = run_dir / "config.json"
    if not config.is_file():
        raise ConfigError(f"--run {run_dir}: not a run folder (no config.json)")
    return Recipe.model_validate(json.loads(config.read_text(encoding="utf-8"))["recipe"])


async def rate_run(
    run_dir: Path, out: Path, user_sim: ModelSettings | None = None, *, concurrency: int = 4, cache: bool = True
) -> dict[str, Any]:
    """Rate every ok result of the run in `run_dir`; write R-J pairs to `out`; return counts."""
    recipe = _run_recipe(run_dir)
    cases = {c.id: c for c in recipe.cases(limited=False)}
    results = [
        r
        for r in ResultsFile(run_dir / "results.jsonl").load().values()
        if r.ok and r.response is not None and r.response.text.strip() and r.control is None  # not its controls
    ]
    if not results:
        raise ConfigError(f"--run {run_dir}: no finished responses to rate")
    settings = user_sim or recipe.role_models()["user_sim"]
    await check_models({"user_sim": settings})  # the run's preflight of the model it calls: exit 2 on a bad key
    gateway = Gateway(
        {"user_sim": settings},
        cache=ResponseCache(cache_dir() / "llm") if cache else None,
        ledger=Ledger(out.with_suffix(".ledger.jsonl"), run_id=f"feedback-{run_dir.name}"),
    )
    limit = asyncio.Semaphore(concurrency)

    async def one(result) -> dict[str, Any]:
        case = cases.get(result.case_id)
        if case is None:
            return {"case_id": result.case_id, "system": result.system, "error": "case not in the benchmark any more"}
        async with limit:
            with call_tags(case=result.case_id, system=result.system, epoch=str(result.epoch), node="feedback"):
                try:
                    with answers_whole(gateway, "user_sim"):  # a rating from a cut answer is not written
                        feedback = await rate_response(gateway, case, result.response.text)
                except ModelCallError as exc:
                    return {"case_id": result.case_id, "system": result.system, "error": str(exc)}
        return {
            "case_id": result.case_id,
            "system": result.system,
            "scores": {name: j.score for name, j in feedback.judgments().items()},
            "rj_pairs": [p.model_dump() for p in feedback.rj_pairs(result.response.text)],
        }

    rated = await asyncio.gather(*(one(r) for r in results))
    ok = [r for r in rated if "rj_pairs" in r]
    write_atomically(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ok))
    return {
        "run": str(run_dir),
        "out": str(out),
        "rated": len(ok),
        "failed": {f"{r['case_id']}::{r['system']}": r["error"] for r in rated if "error" in r},
        "rj_pairs": sum(len(r["rj_pairs"]) for r in ok),
        "dry_run": gateway.dry_run,
        "ledger": gateway.ledger.totals(),
    }
