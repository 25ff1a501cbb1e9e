"""`atelier simulate history`: synthesize PDR-Bench dynamic contexts for a benchmark's personas.

Writes, into one folder (held by one process at a time, `runs.folder_lock`):
- `contexts_<language>.jsonl` — one record per user with at least one item, in the `pdr` loader's
  contexts format (point a recipe's `[benchmark.options] contexts_file` at it to run the `context`
  settings); a user whose history is incomplete is written with what it has and named as such;
- `synthesis.jsonl` — every step of every user's synthesis as it happens (agents.user_sim.history's
  events: accepted items, rejected drafts and why, raised budgets, failed calls), appended at once,
  so no item that was written is lost, whatever stops the command;
- `manifest.json` — models, seed, options; per user its status, the traits not complete with the
  reason for each missing item, the content checks and protocol figures, and the reversibility
  verdicts and gate; pooled figures over users; the recipe lines that use the file;
- `ledger.jsonl` — every model call.

Running it again with the same `--out` continues: the accepted items are kept, only the missing
ones are written (their drafts counted on, so a rejected draft is not asked for again as it was),
and the checks run on the whole history; the response cache makes calls already answered free. It
refuses to continue a history planned with other options or written by another model.

Users are synthesized concurrently (`concurrency`), each user's traits concurrently within the
models' own bounds. A time limit (`time_limit_s`) ends the session cleanly: what was accepted is
written, the rest is reported as not attempted, and the next session continues.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.embeddings import get_embedder
from atelier.agents.models.gateway import Gateway, ModelCallError, answers_whole
from atelier.agents.models.ledger import Ledger, call_tags
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim import HistoryOptions, check_protocol, check_reversibility, synthesize_history
from atelier.agents.user_sim.contradiction import judge_contradictions
from atelier.agents.user_sim.history import (
    SynthesisEvent,
    TraitReport,
    WritingEffort,
    accepted_items,
    assemble_record,
    history_rules,
    plan_history,
    trait_reports,
)
from atelier.agents.user_sim.protocol import person_text, problem_kind, record_items
from atelier.agents.user_sim.reversibility import DEFAULT_MIN_RECOVERED, reversibility_problems
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl
from atelier.benchmarks.data_files import cache_dir
from atelier.benchmarks.loaders.pdr import ContextRecord, context_history, read_contexts, read_language
from atelier.runs.folder.lock import RunFolderLock
from atelier.runs.folder.results import write_json_atomic
from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK, most_common_lines, reason_of

ROLES = ("history_writer", "history_checker")
NEAR_DUPLICATE_EMBEDDER = "local"  # the MiniLM that finds an item said again in other words
JOURNAL = "synthesis.jsonl"
MANIFEST = "manifest.json"
NOT_ATTEMPTED = "not attempted: the session's time limit came first"
GATE_LINES = 10  # users named on stderr for the reversibility gate


class HistoryJob(BaseModel):
    """Everything that decides the output (recorded whole in the manifest)."""

    model_config = ConfigDict(extra="forbid")

    benchmark: Literal["pdr"] = Field(default="pdr", description="Only pdr reads a contexts file.")
    users: list[str] = Field(min_length=1)
    options: HistoryOptions = Field(default_factory=HistoryOptions)
    models: dict[str, ModelSettings] = Field(default_factory=lambda: {r: ModelSettings() for r in ROLES})
    effort: WritingEffort = Field(default_factory=WritingEffort)
    check: bool = Field(default=True, description="Run the reversibility check (two model passes per user).")
    min_recovered: float = Field(
        default=DEFAULT_MIN_RECOVERED,
        ge=0.0,
        le=1.0,
        description="The reversibility gate: the least share of facets recovered.",
    )
    concurrency: int = Field(default=2, gt=0, description="Users synthesized at once.")
    time_limit_s: float | None = Field(default=None, gt=0, description="End the session cleanly after this long.")


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
    synthesis: dict[str, Any] | None = None  # `simulate history` only: what became of the plan

    @property
    def complete(self) -> bool:
        return self.synthesis is None or self.synthesis["status"] == "complete"


# --------------------------------------------------------------------------- checking one record


async def record_figures(
    gateway: Gateway,
    attributes: dict[str, Any],
    record: ContextRecord,
    language: str,
    *,
    reversibility: bool,
    min_recovered: float,
    max_tokens_ceiling: int | None = None,
) -> dict[str, Any]:
    """The content checks and protocol figures of one user's record and, if asked, its
    reversibility verdicts and gate. With the inverse pass run, items per tag count the items it
    cited. A checker that fails is recorded as the reason the gate is not passed."""
    figures: dict[str, Any] = {}
    attribution = None
    contradicted: dict[str, str] | None = None
    if reversibility:  # a checker model is given: it also judges contradictions with the persona
        try:
            with call_tags(node="contradictions"), answers_whole(gateway, "history_checker"):
                contradicted = await judge_contradictions(
                    gateway,
                    "history_checker",
                    attributes,
                    [(i, person_text(item)) for i, item in record_items(record)],
                )
        except ModelCallError as exc:
            figures["reversibility_problems"] = [f"reversibility: the contradiction check failed: {exc}"]
    if reversibility:
        try:
            with call_tags(node="reversibility"):
                report = await check_reversibility(
                    gateway, attributes, context_history(record), max_tokens_ceiling=max_tokens_ceiling
                )
        except ModelCallError as exc:
            figures["reversibility_problems"] = [
                *figures.get("reversibility_problems", []),
                f"reversibility: the check failed: {exc}",
            ]
        else:
            figures["reversibility"] = report.model_dump()
            figures["reversibility_problems"] = [
                *figures.get("reversibility_problems", []),
                *reversibility_problems(report, min_recovered),
            ]
            attribution = report.evidence
    figures["protocol"] = check_protocol(
        attributes,
        record,
        rules=history_rules(attributes, language),
        attribution=attribution,
        contradicted=contradicted,
        embed=get_embedder(NEAR_DUPLICATE_EMBEDDER).embed,
    ).model_dump()
    return dict(sorted(figures.items(), key=lambda kv: kv[0] != "protocol"))


def pooled_figures(outcomes: list[UserOutcome], min_recovered: float | None) -> dict[str, Any]:
    """Totals over the users with a record: items, counted items and their conversational share,
    content failures, reversibility pooled over facets (and its gate when `min_recovered`)."""
    done = [o for o in outcomes if o.record is not None and "protocol" in o.figures]
    protocol = [o.figures["protocol"] for o in done]
    counted = sum(p["counted_items"] for p in protocol)
    talk = sum(round(p["conversational_share"] * p["counted_items"]) for p in protocol)
    content: Counter[str] = Counter()
    for p in protocol:
        content.update(p["content_failure_counts"])
    out: dict[str, Any] = {
        "users": len(done),
        "complete_users": sum(o.complete for o in done),
        "failed_users": len(outcomes) - len(done),
        "items": sum(p["items"] for p in protocol),
        "counted_items": counted,
        "items_failing_content_checks": sum(len(p["content_failures"]) for p in protocol),
        "content_failure_counts": dict(content),
        "conversational_share": round(talk / counted, 4) if counted else 0.0,
        "min_items_per_tag": min((n for p in protocol for n in p["items_per_tag"].values()), default=0),
        "unlinked_items": sum(len(p["unlinked_items"]) for p in protocol),
        "protocol_ok": bool(done)
        and all(p["ok"] for p in protocol)
        and len(done) == len(outcomes)
        and all(o.complete for o in done),
    }
    reports = [o.figures["reversibility"] for o in done if "reversibility" in o.figures]
    if reports:
        traits = sum(r["traits"] for r in reports)
        counts = {v: sum(r["counts"][v] for r in reports) for v in reports[0]["counts"]}
        share = round(counts["recovered"] / traits, 4) if traits else 0.0
        out["reversibility"] = {
            "traits": traits,
            "counts": counts,
            "recovered_share": share,
            "per_user_recovered_share": {
                o.user_id: o.figures["reversibility"]["recovered_share"] for o in done if "reversibility" in o.figures
            },
        }
        if min_recovered is not None:
            out["reversibility"]["min_recovered"] = min_recovered
            out["reversibility"]["problems"] = (
                [
                    f"reversibility: {share:.1%} of {traits} facets recovered over {len(reports)} user(s), below the "
                    f"minimum {min_recovered:.0%}"
                ]
                if share < min_recovered
                else []
            )
    return out


# --------------------------------------------------------------------------- the journal and resuming


class Journal:
    """`synthesis.jsonl`: the synthesis events of every session, appended as they happen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prior: list[SynthesisEvent] = []
        for number, data in read_appended_jsonl(path, repair=True).values:
            try:
                self.prior.append(SynthesisEvent.model_validate(data))
            except ValidationError as exc:
                first = exc.errors()[0]
                raise DataError(
                    f"not a synthesis event: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}",
                    file=path,
                    line=number,
                ) from None
        self.new: list[SynthesisEvent] = []

    def append(self, event: SynthesisEvent) -> None:
        self.new.append(event)
        with no_follow.open_file(self.path, "a") as fh:
            fh.write(json.dumps(event.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) + "\n")

    def of(self, user_id: str, session_only: bool = False) -> list[SynthesisEvent]:
        return [e for e in (self.new if session_only else [*self.prior, *self.new]) if e.user == user_id]


def _check_resumable(out_dir: Path, job: HistoryJob) -> dict[str, Any] | None:
    """The previous manifest of `out_dir`, if any, after checking this job may continue its history:
    same benchmark and options (the plan), same writer model."""
    path = out_dir / MANIFEST
    if not path.exists():
        return None
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
        before = previous["job"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read the manifest of the history this folder holds: {exc}", file=path) from None
    now = job.model_dump(mode="json")
    differences = (
        [f"benchmark = {before.get('benchmark')!r}, now {now['benchmark']!r}"]
        if before.get("benchmark") != now["benchmark"]
        else []
    )
    differences += [
        f"options.{k} = {before.get('options', {}).get(k)!r}, now {v!r}"
        for k, v in now["options"].items()
        if before.get("options", {}).get(k) != v
    ]
    writer_before = before.get("models", {}).get("history_writer", {})
    writer = job.models["history_writer"]
    if _writer_identity(writer_before) != _writer_identity(writer.model_dump(mode="json")):
        differences.append(f"models.history_writer.model = {writer_before.get('model')!r}, now {writer.model!r}")
    if differences:
        raise ConfigError(
            f"{out_dir} holds a history written with {differences[0]}"
            f"{f' (and {len(differences) - 1} more difference(s))' if len(differences) > 1 else ''}: "
            "continue it with the same options and writer model, or give another --out"
        )
    return previous


def _writer_identity(settings: dict[str, Any]) -> Any:
    """What makes a writer the same writer: the model as far as it decides the answers (the scripted
    model's latency and fault rates do not) and its endpoint."""
    try:
        return ModelSettings.model_validate(settings).answer_identity()["model"], settings.get("api_base")
    except ValidationError:  # a model this machine no longer has: compare what was written down
        return settings.get("model"), settings.get("api_base")


def synthesis_summary(
    plan_size: int, traits: dict[str, TraitReport], events: list[SynthesisEvent], resumed: int
) -> dict[str, Any]:
    """One user's synthesis for the manifest: status, counts, this session's events, and the traits
    not complete with the reason for each missing item."""
    written = sum(t.written for t in traits.values())
    rejected_by = Counter(
        problem_kind(part.strip()) for e in events if e.kind == "rejected" for part in e.detail.split("; ")
    )
    return {
        "status": "complete" if written == plan_size else "partial" if written else "missing",
        "items_planned": plan_size,
        "items_written": written,
        "items_from_earlier_sessions": resumed,
        "session_events": dict(Counter(e.kind for e in events)),
        "session_rejections_by_check": dict(rejected_by),
        "traits_incomplete": {path: t.model_dump() for path, t in traits.items() if t.status != "complete"},
    }


def missing_reasons(synthesis: dict[str, Any] | None) -> Counter[str]:
    """Why a user's items are missing, by kind: `rejected: template echo`, `invalid: <error>`, ..."""
    reasons: Counter[str] = Counter()
    for trait in (synthesis or {}).get("traits_incomplete", {}).values():
        reasons.update(trait["missing_by_reason"])
    return reasons


# --------------------------------------------------------------------------- one user


async def _one_user(
    gateway: Gateway, job: HistoryJob, user_id: str, attributes: dict[str, Any], journal: Journal
) -> UserOutcome:
    with call_tags(case=user_id):
        with call_tags(node="write_history"):
            history = await synthesize_history(
                gateway,
                user_id,
                attributes,
                job.options,
                effort=job.effort,
                prior=journal.of(user_id),
                on_event=journal.append,
            )
        outcome = _outcome_of(user_id, attributes, job, journal)
        if outcome.record is not None:
            outcome.figures = await record_figures(
                gateway,
                attributes,
                outcome.record,
                job.options.language,
                reversibility=job.check and history.complete,
                min_recovered=job.min_recovered,
                max_tokens_ceiling=job.effort.max_tokens_ceiling,
            )
            if job.check and not history.complete:
                outcome.figures["reversibility_problems"] = [
                    "reversibility: not checked, the history is incomplete (continue it with the same --out)"
                ]
    return outcome


def _outcome_of(
    user_id: str, attributes: dict[str, Any], job: HistoryJob, journal: Journal, unattempted: str = "not attempted"
) -> UserOutcome:
    """A user's outcome from the journal: the record of its accepted items and what became of its plan."""
    plan = plan_history(user_id, attributes, job.options)
    events = journal.of(user_id)
    record = assemble_record(user_id, plan, events)
    traits = trait_reports(plan, events, unattempted=unattempted)
    now = accepted_items(events)
    new = {e.slots[0] for e in journal.of(user_id, session_only=True) if e.kind == "accepted"}
    resumed = sum(
        1 for slot in accepted_items([e for e in journal.prior if e.user == user_id]) if slot in now and slot not in new
    )
    summary = synthesis_summary(len(plan), traits, journal.of(user_id, session_only=True), resumed)
    items = len(record.memories) + len(record.dialogues) + len(record.searches)
    error = None
    if not items:
        reasons = missing_reasons(summary)
        error = f"no item written: {reasons.most_common(1)[0][0] if reasons else unattempted}"
    return UserOutcome(user_id, record=record if items else None, error=error, synthesis=summary)


def _write_contexts(path: Path, outcomes: list[UserOutcome]) -> None:
    write_atomically(
        path,
        "".join(
            json.dumps(o.record.model_dump(exclude_none=True), ensure_ascii=False) + "\n"
            for o in outcomes
            if o.record is not None
        ),
    )


class _UserProgress:
    """A rich progress bar over users (done / failed) on stderr, or nothing when disabled."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self.failed = enabled, total, 0

    def __enter__(self) -> _UserProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("users"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )  # stdout carries the JSON
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


def _dry_run(gateway: Gateway, journal: Journal, outcomes: list[UserOutcome]) -> bool:
    """Whether the offline scripted model answered any of this session's calls, or wrote any item
    the contexts file holds (an earlier session's included)."""
    if any(e.dry_run for e in gateway.ledger.entries):
        return True
    last: dict[tuple[str, str], SynthesisEvent] = {}  # the event behind each item a record holds
    for event in [*journal.prior, *journal.new]:
        if event.kind == "accepted" and event.slots:
            last[(event.user, event.slots[0])] = event
    written = {
        (o.user_id, i.id)
        for o in outcomes
        if o.record is not None
        for i in [*o.record.memories, *o.record.dialogues, *o.record.searches]
    }
    return any(e.dry_run and (e.user, (e.item or {}).get("id")) in written for e in last.values())


async def synthesize_contexts(
    job: HistoryJob, out_dir: Path, *, cache: bool = True, progress: bool = False
) -> dict[str, Any]:
    """Run (or continue) the job; write the contexts file, the journal, the manifest and the ledger
    into `out_dir`; return the manifest."""
    personas = pdr_personas(job.options.language)
    for user in job.users:
        if user not in personas:
            raise ConfigError(f"no {job.options.language} persona {user!r}")
    with RunFolderLock(out_dir, what="history"):
        return await _synthesize_locked(job, out_dir, personas, cache=cache, progress=progress)


async def _synthesize_locked(
    job: HistoryJob, out_dir: Path, personas: dict[str, dict[str, Any]], *, cache: bool, progress: bool
) -> dict[str, Any]:
    started = time.monotonic()
    previous = _check_resumable(out_dir, job)
    journal = Journal(out_dir / JOURNAL)
    sessions = int((previous or {}).get("sessions", 0)) + 1
    contexts_name = f"contexts_{job.options.language}.jsonl"
    contexts_path = out_dir / contexts_name
    write_json_atomic(
        out_dir / MANIFEST,
        {  # the job first: a session killed early can still be continued
            **(previous or {}),
            "job": job.model_dump(mode="json"),
            "sessions": sessions,
            "session_finished": False,
        },
    )
    gateway = Gateway(
        dict(job.models),
        cache=ResponseCache(cache_dir() / "llm") if cache else None,
        ledger=Ledger(out_dir / "ledger.jsonl", run_id=f"history-{out_dir.name}"),
    )
    limit = asyncio.Semaphore(job.concurrency)
    finished: dict[str, UserOutcome] = {}
    try:
        with _UserProgress(progress, len(job.users)) as bar:

            async def bounded(user_id: str) -> None:
                async with limit:
                    outcome = await _one_user(gateway, job, user_id, personas[user_id], journal)
                finished[user_id] = outcome  # each finished user is on disk at once, in the requested order
                _write_contexts(contexts_path, [finished[u] for u in job.users if u in finished])
                bar.advance(outcome)

            tasks = [asyncio.ensure_future(bounded(u)) for u in job.users]
            done, pending = await asyncio.wait(tasks, timeout=job.time_limit_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                task.result()  # a bug, not a model's failure: raised as itself
    finally:
        await gateway.aclose()
    timed_out = bool(pending)
    outcomes = []
    for user in job.users:
        if user in finished:
            outcomes.append(finished[user])
            continue
        outcome = _outcome_of(user, personas[user], job, journal, unattempted=NOT_ATTEMPTED)
        if outcome.record is not None:  # content checks and figures need no model
            outcome.figures = await record_figures(
                gateway,
                personas[user],
                outcome.record,
                job.options.language,
                reversibility=False,
                min_recovered=job.min_recovered,
            )
            if job.check:
                outcome.figures["reversibility_problems"] = [
                    "reversibility: not checked, the session's time limit came first (continue with the same --out)"
                ]
        outcomes.append(outcome)
    _write_contexts(contexts_path, outcomes)
    written = [o.user_id for o in outcomes if o.record is not None]
    manifest = {
        "created_at": (previous or {}).get("created_at") or datetime.now(UTC).isoformat(timespec="seconds"),
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "sessions": sessions,
        "session_finished": True,
        "session_seconds": round(time.monotonic() - started, 1),
        "time_limit_reached": timed_out,
        "dry_run": _dry_run(gateway, journal, outcomes),
        "benchmark": job.benchmark,
        "language": job.options.language,
        "contexts_file": contexts_name,
        "seed": job.options.seed,
        "job": job.model_dump(mode="json"),
        "overall": pooled_figures(outcomes, job.min_recovered if job.check else None),
        "per_user": {o.user_id: {"synthesis": o.synthesis, **o.figures} for o in outcomes if o.record is not None},
        "failed": {o.user_id: o.error for o in outcomes if o.error},
        "failed_synthesis": {o.user_id: o.synthesis for o in outcomes if o.record is None and o.synthesis},
        "ledger": gateway.ledger.totals(),
        "recipe": {
            "benchmark": {
                "name": job.benchmark,
                "setting": "context",
                "options": {"language": job.options.language, "contexts_file": str(contexts_path), "users": written},
            }
        },
    }
    write_json_atomic(out_dir / MANIFEST, manifest)
    return manifest


# --------------------------------------------------------------------------- `simulate check`


def written_with(path: Path) -> HistoryJob | None:
    """The job of the `simulate history` that wrote the contexts file `path` (its folder's
    manifest.json names it), or None: the file was written otherwise."""
    manifest = path.parent / MANIFEST
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        job = HistoryJob.model_validate(data["job"])
    except (OSError, ValueError, KeyError, TypeError, ValidationError):
        return None
    return job if data.get("contexts_file") == path.name else None


async def check_contexts(
    path: Path,
    language: str,
    checker: ModelSettings | None,
    *,
    min_recovered: float = DEFAULT_MIN_RECOVERED,
    cache: bool = True,
) -> dict[str, Any]:
    """Content checks and protocol figures (and, with a `checker` model, the model's contradiction
    check, reversibility and its gate) of an existing contexts file."""
    personas = pdr_personas(language)
    records = read_contexts(path)
    unknown = [u for u in records if u not in personas]
    if unknown:
        raise DataError(f"user {unknown[0]!r} has no {language} persona", file=path, field="userid")
    gateway = Gateway(
        {"history_checker": checker or ModelSettings()}, cache=ResponseCache(cache_dir() / "llm") if cache else None
    )
    outcomes = []
    try:
        for user_id, record in records.items():
            with call_tags(case=user_id):
                figures = await record_figures(
                    gateway,
                    personas[user_id],
                    record,
                    language,
                    reversibility=checker is not None,
                    min_recovered=min_recovered,
                )
            outcomes.append(UserOutcome(user_id, record=record, figures=figures))
    finally:
        await gateway.aclose()
    return {
        "contexts_file": str(path),
        "language": language,
        "overall": pooled_figures(outcomes, min_recovered if checker is not None else None),
        "per_user": {o.user_id: o.figures for o in outcomes},
        "failed": {},
        "dry_run": any(e.dry_run for e in gateway.ledger.entries),
        "ledger": gateway.ledger.totals(),
    }


# --------------------------------------------------------------------------- the end


def history_outcome(report: dict[str, Any], top: int = 3) -> tuple[int, list[str]]:
    """The exit code and the closing lines (stderr) of `simulate history` / `simulate check`, told
    like a run's end (runs.outcome): 3 when a user failed, is incomplete, fails a content check,
    breaks the protocol or the reversibility gate (per user or overall), else 0; the counts, the
    most common reasons, and the users and facets below the reversibility gate."""
    failed = report["failed"]
    per_user = report["per_user"]
    incomplete = [u for u, f in per_user.items() if (f.get("synthesis") or {}).get("status", "complete") != "complete"]
    problems = {
        u: [*f.get("protocol", {}).get("problems", []), *f.get("reversibility_problems", [])]
        for u, f in per_user.items()
    }
    breaking = [u for u, found in problems.items() if found and u not in incomplete]
    within = len(per_user) - len(breaking) - len(incomplete)
    head = f"users: {within} within the protocol"
    if breaking:
        head += f", {len(breaking)} breaking it"
    if incomplete:
        head += f", {len(incomplete)} incomplete"
    head += f", {len(failed)} failed (of {len(per_user) + len(failed)})"
    lines = [head]
    if report.get("time_limit_reached"):
        lines.append(
            f"the session's time limit was reached after {report.get('session_seconds', 0) / 60:.1f} min: "
            "run the same command again (same --out) to continue"
        )
    missing: Counter[str] = Counter()
    for synthesis in [*(f.get("synthesis") for f in per_user.values()), *report.get("failed_synthesis", {}).values()]:
        missing.update(missing_reasons(synthesis))
    lines += most_common_lines("user failures", Counter(reason_of(error) for error in failed.values()), top)
    lines += most_common_lines("reasons items are missing", missing, top)
    lines += most_common_lines(
        "protocol problems",
        Counter(reason_of(p) for u, found in problems.items() for p in found if not p.startswith("reversibility:")),
        top,
    )
    gated = [(u, [p for p in found if p.startswith("reversibility:")]) for u, found in problems.items()]
    gated = [(u, found) for u, found in gated if found]
    if gated:
        lines.append("reversibility gate:")
        lines += [
            f"  {u}: " + "; ".join(p.removeprefix("reversibility: ") for p in found) for u, found in gated[:GATE_LINES]
        ]
        if len(gated) > GATE_LINES:
            lines.append(f"  ... and {len(gated) - GATE_LINES} more user(s)")
    overall = report["overall"].get("reversibility", {}).get("problems", [])
    lines += [f"overall {p}" for p in overall]
    bad = failed or incomplete or breaking or overall or report.get("time_limit_reached")
    return (EXIT_FAILURES if bad else EXIT_OK), lines


def run_history_job(job: HistoryJob, out_dir: Path, *, cache: bool = True, progress: bool = False) -> dict[str, Any]:
    return asyncio.run(synthesize_contexts(job, out_dir, cache=cache, progress=progress))
