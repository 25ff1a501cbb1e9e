"""`atelier simulate history`: synthesize PDR-Bench dynamic contexts for a benchmark's personas.

Writes, into one folder:
- `contexts_<language>.jsonl` — one record per user in the `pdr` loader's contexts format (point a
  recipe's `[benchmark.options] contexts_file` at it to run the `context` settings);
- `manifest.json` — models, seed, options, and per user the protocol figures and the
  reversibility verdicts; pooled figures over users; the recipe lines that use the file;
- `ledger.jsonl` — every model call.

Users are synthesized concurrently (`concurrency`), each user's traits concurrently within the
models' own bounds. A user whose synthesis fails is named in the manifest with the reason and
left out of the file; the others are kept. Model answers are cached like a run's, so the same
seed and models give the same history (a rerun costs nothing), and another seed another history.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.cache import ResponseCache
from agents.gateway import Gateway, ModelCallError
from agents.ledger import Ledger, call_tags
from agents.settings import ModelSettings
from agents.user_sim import HistoryOptions, check_protocol, check_reversibility, synthesize_history
from benchmarks.atomic_files import write_atomically
from benchmarks.data_files import cache_dir
from benchmarks.errors import ConfigError, DataError
from benchmarks.loaders.pdr import ContextRecord, context_history, read_contexts, read_language
from runs.outcome import EXIT_FAILURES, EXIT_OK, most_common_lines, reason_of
from runs.results import write_json_atomic

ROLES = ("history_writer", "history_checker")


class HistoryJob(BaseModel):
    """Everything that decides the output (recorded whole in the manifest)."""

    model_config = ConfigDict(extra="forbid")

    benchmark: Literal["pdr"] = Field(default="pdr", description="Only pdr reads a contexts file.")
    users: list[str] = Field(min_length=1)
    options: HistoryOptions = Field(default_factory=HistoryOptions)
    models: dict[str, ModelSettings] = Field(default_factory=lambda: {r: ModelSettings() for r in ROLES})
    check: bool = Field(default=True, description="Run the reversibility check (two model passes per user).")
    concurrency: int = Field(default=2, gt=0, description="Users synthesized at once.")


def pdr_personas(language: str) -> dict[str, dict[str, Any]]:
    return {uid: p.attributes for uid, p in read_language(language).personas.items()}


def choose_users(personas: dict[str, Any], users: list[str] | None, limit: int | None) -> list[str]:
    """The listed users (each must exist), else the first `limit` in the personas file's order."""
    if users:
        unknown = [u for u in users if u not in personas]
        if unknown:
            raise ConfigError(f"--users: no persona {unknown[0]!r}; valid: {', '.join(personas)}")
        return list(dict.fromkeys(users))
    return list(personas)[:limit] if limit else list(personas)


@dataclass
class UserOutcome:
    user_id: str
    record: ContextRecord | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


async def record_figures(gateway: Gateway, attributes: dict[str, Any], record: ContextRecord,
                         reversibility: bool) -> dict[str, Any]:
    """The protocol figures of one user's record and, if asked, its reversibility verdicts."""
    figures: dict[str, Any] = {"protocol": check_protocol(attributes, record).model_dump()}
    if reversibility:
        with call_tags(node="reversibility"):
            report = await check_reversibility(gateway, attributes, context_history(record))
        figures["reversibility"] = report.model_dump()
    return figures


async def _one_user(gateway: Gateway, job: HistoryJob, user_id: str, attributes: dict[str, Any]) -> UserOutcome:
    with call_tags(case=user_id):
        try:
            with call_tags(node="write_history"):
                history = await synthesize_history(gateway, user_id, attributes, job.options)
            figures = await record_figures(gateway, attributes, history.record, job.check)
        except ModelCallError as exc:  # this user is left out and named; the others go on
            return UserOutcome(user_id, error=str(exc))
    return UserOutcome(user_id, record=history.record, figures=figures)


def pooled_figures(outcomes: list[UserOutcome]) -> dict[str, Any]:
    """Totals over the users that succeeded: items, conversational share, reversibility (pooled over facets)."""
    done = [o for o in outcomes if o.record is not None]
    protocol = [o.figures["protocol"] for o in done]
    items = sum(p["items"] for p in protocol)
    out: dict[str, Any] = {
        "users": len(done),
        "failed_users": len(outcomes) - len(done),
        "items": items,
        "conversational_share": round(sum(p["dialogues"] for p in protocol) / items, 4) if items else 0.0,
        "min_items_per_tag": min((n for p in protocol for n in p["items_per_tag"].values()), default=0),
        "unlinked_items": sum(len(p["unlinked_items"]) for p in protocol),
        "protocol_ok": all(p["ok"] for p in protocol) and len(done) == len(outcomes),
    }
    reports = [o.figures["reversibility"] for o in done if "reversibility" in o.figures]
    if reports:
        traits = sum(r["traits"] for r in reports)
        counts = {v: sum(r["counts"][v] for r in reports) for v in reports[0]["counts"]}
        out["reversibility"] = {
            "traits": traits,
            "counts": counts,
            "recovered_share": round(counts["recovered"] / traits, 4) if traits else 0.0,
            "per_user_recovered_share": {o.user_id: o.figures["reversibility"]["recovered_share"] for o in done},
        }
    return out


def _write_contexts(path: Path, outcomes: list[UserOutcome]) -> None:
    write_atomically(path, "".join(json.dumps(o.record.model_dump(exclude_none=True), ensure_ascii=False) + "\n"
                                   for o in outcomes if o.record is not None))


class _UserProgress:
    """A rich progress bar over users (done / failed) on stderr, or nothing when disabled."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self.failed = enabled, total, 0

    def __enter__(self) -> "_UserProgress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("users"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                 console=Console(stderr=True))  # stdout carries the JSON
            self._bar.start()
            self._task = self._bar.add_task("history", total=self.total, failed=0)
        return self

    def advance(self, outcome: UserOutcome) -> None:
        self.failed += outcome.error is not None
        if self.enabled:
            self._bar.update(self._task, advance=1, failed=self.failed)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._bar.stop()


async def synthesize_contexts(job: HistoryJob, out_dir: Path, *, cache: bool = True,
                              progress: bool = False) -> dict[str, Any]:
    """Run the job; write the contexts file, the manifest and the ledger into `out_dir`; return the manifest."""
    personas = pdr_personas(job.options.language)
    for user in job.users:
        if user not in personas:
            raise ConfigError(f"no {job.options.language} persona {user!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    ledger_path = out_dir / "ledger.jsonl"
    gateway = Gateway(
        {"user_sim": ModelSettings(), **job.models},
        cache=ResponseCache(cache_dir() / "llm") if cache else None,
        ledger=Ledger(ledger_path, run_id=f"history-{out_dir.name}"),
    )
    limit = asyncio.Semaphore(job.concurrency)
    contexts_name = f"contexts_{job.options.language}.jsonl"
    contexts_path = out_dir / contexts_name
    finished: dict[str, UserOutcome] = {}

    with _UserProgress(progress, len(job.users)) as bar:

        async def bounded(user_id: str) -> UserOutcome:
            async with limit:
                outcome = await _one_user(gateway, job, user_id, personas[user_id])
            finished[user_id] = outcome  # each finished user is on disk at once, in the requested order
            _write_contexts(contexts_path, [finished[u] for u in job.users if u in finished])
            bar.advance(outcome)
            return outcome

        outcomes = await asyncio.gather(*(bounded(u) for u in job.users))
    _write_contexts(contexts_path, outcomes)
    written = [o.user_id for o in outcomes if o.record is not None]
    manifest = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dry_run": gateway.dry_run,
        "benchmark": job.benchmark,
        "language": job.options.language,
        "contexts_file": contexts_name,
        "seed": job.options.seed,
        "job": job.model_dump(mode="json"),
        "overall": pooled_figures(outcomes),
        "per_user": {o.user_id: o.figures for o in outcomes if o.record is not None},
        "failed": {o.user_id: o.error for o in outcomes if o.error},
        "ledger": gateway.ledger.totals(),
        "recipe": {
            "benchmark": {
                "name": job.benchmark,
                "setting": "context",
                "options": {"language": job.options.language, "contexts_file": str(contexts_path), "users": written},
            }
        },
    }
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest


async def check_contexts(path: Path, language: str, checker: ModelSettings | None, *,
                         cache: bool = True) -> dict[str, Any]:
    """Protocol figures (and, with a `checker` model, reversibility) of an existing contexts file."""
    personas = pdr_personas(language)
    records = read_contexts(path)
    unknown = [u for u in records if u not in personas]
    if unknown:
        raise DataError(f"user {unknown[0]!r} has no {language} persona", file=path, field="userid")
    gateway = Gateway({"history_checker": checker or ModelSettings()},
                      cache=ResponseCache(cache_dir() / "llm") if cache else None)
    outcomes = []
    for user_id, record in records.items():
        with call_tags(case=user_id):
            try:
                figures = await record_figures(gateway, personas[user_id], record, checker is not None)
                outcomes.append(UserOutcome(user_id, record=record, figures=figures))
            except ModelCallError as exc:
                outcomes.append(UserOutcome(user_id, error=str(exc)))
    return {
        "contexts_file": str(path),
        "language": language,
        "overall": pooled_figures(outcomes),
        "per_user": {o.user_id: o.figures for o in outcomes if o.record is not None},
        "failed": {o.user_id: o.error for o in outcomes if o.error},
        "dry_run": checker is not None and gateway.dry_run,
        "ledger": gateway.ledger.totals(),
    }


def history_outcome(report: dict[str, Any], top: int = 3) -> tuple[int, list[str]]:
    """The exit code and the closing lines (stderr) of `simulate history` / `simulate check`, told
    like a run's end (runs.outcome): 3 when a user failed or breaks the protocol, else 0; the counts
    and the most common reasons."""
    failed = report["failed"]
    problems = {user: figures["protocol"]["problems"] for user, figures in report["per_user"].items()}
    breaking = [user for user, found in problems.items() if found]
    head = f"users: {len(problems) - len(breaking)} within the protocol"
    if breaking:
        head += f", {len(breaking)} breaking it"
    head += f", {len(failed)} failed (of {len(problems) + len(failed)})"
    lines = [head,
             *most_common_lines("user failures", Counter(reason_of(error) for error in failed.values()), top),
             *most_common_lines("protocol problems", Counter(reason_of(p) for found in problems.values() for p in found), top)]
    return (EXIT_FAILURES if failed or breaking else EXIT_OK), lines


def run_history_job(job: HistoryJob, out_dir: Path, *, cache: bool = True, progress: bool = False) -> dict[str, Any]:
    return asyncio.run(synthesize_contexts(job, out_dir, cache=cache, progress=progress))
