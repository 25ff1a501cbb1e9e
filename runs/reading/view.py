"""`atelier view RUN_DIR`: a run in the browser — every episode, and each one's steps, calls and judgments.

The index lists every (case, system) of the run — status, each judge's score, what degraded, wall
time, model calls and tokens — with filters by system, judge, score range, degraded kind and status
(held in the URL's query or hash, so `index.html?system=direct-none` opens filtered). Each episode's
page shows:

- the graph's steps on a timeline, one lane per graph namespace (the episode, memory, the system's
  pipeline, the judges): parallel subgraphs of one kind — deep_research's researchers — get a lane
  each (`researcher #1`, `#2`);
- each step's nodes and its state change, read from the run's checkpoints by `runs.trace` (the
  reader behind `atelier trace`);
- each model call: prompt and answer (from the run's response cache), tokens, latency, attempts,
  cache hit and status (from `ledger.jsonl`); calls made one after another by one role at one node
  (a memory's ingest: one per history event) are one row with their totals that opens onto each;
- the result: the answer, the recalled memory, each judge's reasoning as prose (the report's) with
  its raw details, flags and degraded steps (from `results.jsonl`).

Pages are rendered with the report's templating (jinja2, runs/reading/templates/view_*.html.j2) and carry
their own CSS and JS: nothing is fetched, so a written folder opens offline. `--static DIR` writes
`DIR/index.html` and `DIR/episodes/*.html`; without it `runs.view_server` renders the same pages on
each request (a running run's newest episodes appear on reload).
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.ledger import LedgerEntry, read_ledger
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.redaction import active_redactor
from atelier.runs.folder.controls import system_controls
from atelier.runs.folder.epochs import run_epochs
from atelier.runs.folder.results import ResultRecord, ResultsFile, result_key
from atelier.runs.reading.pages import EPISODES_DIR, environment, episode_page
from atelier.runs.reading.trace import Step, _checkpoints, _plain, _where, load_trace
from atelier.runs.reading.usage import MEMORY, usage_kind

VALUE_CHARS = 20_000  # a state value or a message longer than this is cut on the page (and says so)


class EpisodeRow(BaseModel):
    """One (case, system, epoch) of the run as the index lists it."""

    key: str
    case_id: str
    system: str
    epoch: int = 1
    control: str | None = Field(
        default=None,
        description="The counterfactual control this episode is ([run] controls), or None: the system's own.",
    )
    status: str = Field(description="ok | error | missing (no result recorded: not run yet, or still running)")
    error: str | None = None
    scores: dict[str, float | None] = Field(default_factory=dict)
    degraded: dict[str, int] = Field(default_factory=dict, description="Degraded steps by kind.")
    latency_s: float | None = None
    resumed_from: str | None = Field(
        default=None, description="The step a later process resumed the episode at (it was stopped before)."
    )
    calls: int = 0
    tokens: int = 0
    ingest_calls: int = Field(default=0, description="Of its calls, its memory's ingest of the user's history.")
    page: str = Field(description="The episode's page, relative to the index.")


class RunView(BaseModel):
    run_id: str
    recipe: str
    dry_run: bool
    systems: list[str]
    epochs: int = 1
    judges: list[str]
    kinds: list[str] = Field(description="The degraded kinds present in the run.")
    controls: list[str] = Field(default_factory=list, description="The counterfactual controls the run ran.")
    episodes: list[EpisodeRow]


class CallView(BaseModel):
    call_id: str
    node: str | None
    role: str
    model: str
    kind: str
    status: str
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    cache_hit: bool
    attempts: int
    cost_usd: float | None
    messages: list[dict[str, str]] | None = Field(description="The prompt; None when not in the response cache.")
    answer: str | None
    start: float
    end: float
    left: float = 0.0  # on the timeline, % of the episode's span
    width: float = 0.0


GROUP_AT = 3  # this many calls in a row of one kind (role, node, model, kind) in a step are one row that opens


class CallGroup(BaseModel):
    """Calls of one step made one after another by the same role, node and model (a memory's ingest
    makes one per history event): shown as one row with their totals, each call inside."""

    role: str
    node: str | None
    model: str
    kind: str
    calls: list[CallView]

    @property
    def tokens(self) -> tuple[int, int]:
        return sum(c.prompt_tokens for c in self.calls), sum(c.completion_tokens for c in self.calls)

    @property
    def latency_ms(self) -> float:
        return sum(c.latency_ms for c in self.calls)

    @property
    def cache_hits(self) -> int:
        return sum(c.cache_hit for c in self.calls)

    @property
    def failed(self) -> int:
        return sum(c.status != "ok" for c in self.calls)

    @property
    def cost_usd(self) -> float | None:
        costs = [c.cost_usd for c in self.calls if c.cost_usd is not None]
        return sum(costs) if costs else None


def call_groups(calls: list[CallView]) -> list[CallGroup]:
    """`calls` in order, each run of `GROUP_AT` or more of one (role, node, model, kind) as one group;
    a shorter run is a group per call."""
    runs: list[list[CallView]] = []
    for call in calls:
        if runs and (runs[-1][0].role, runs[-1][0].node, runs[-1][0].model, runs[-1][0].kind) == (
            call.role,
            call.node,
            call.model,
            call.kind,
        ):
            runs[-1].append(call)
        else:
            runs.append([call])
    out = []
    for run in runs:
        parts = [run] if len(run) >= GROUP_AT else [[c] for c in run]
        out += [CallGroup(role=p[0].role, node=p[0].node, model=p[0].model, kind=p[0].kind, calls=p) for p in parts]
    return out


class StepView(BaseModel):
    index: int
    where: str
    lane: str
    source: str
    nodes: list[str]
    ts: str
    start: float
    end: float
    changed: dict[str, str] = Field(description="Each state key that changed, as JSON text.")
    calls: list[CallView]
    left: float = 0.0
    width: float = 0.0

    @property
    def groups(self) -> list[CallGroup]:
        return call_groups(self.calls)


class EpisodeView(BaseModel):
    row: EpisodeRow
    lanes: list[str]
    steps: list[StepView]
    span_s: float
    stopped_s: float = Field(
        default=0.0, description="A resumed episode: the time it stood stopped, left out of the timeline."
    )
    stopped_at: float | None = Field(default=None, description="Where on the timeline (%) the stop was cut out.")
    trace_error: str | None = Field(default=None, description="Why there are no steps (the episode never started).")
    record: dict[str, Any] | None = Field(default=None, description="The result line, as JSON.")


class RunViewData:
    """A run folder read once for its view: config, results and ledger."""

    def __init__(self, run_dir: str | Path) -> None:
        from atelier.runs.folder.layout import RunFolder, load_run_config

        self.path = Path(run_dir)
        if not self.path.is_dir():
            raise ConfigError(f"{run_dir}: no such run folder")
        self.config = load_run_config(self.path)
        self.folder = RunFolder(self.path)
        self.records: dict[str, ResultRecord] = (
            ResultsFile(self.folder.results).load() if self.folder.results.exists() else {}
        )
        self.ledger: list[LedgerEntry] = read_ledger(self.folder.ledger) if self.folder.ledger.exists() else []
        self.systems = [s["name"] for s in self.config["recipe"]["systems"]]

    def rows(self) -> list[EpisodeRow]:
        """Every episode of the run: each system's own, then its counterfactual controls' ([run] controls)."""
        usage: dict[tuple[str | None, str | None, int, str | None], list[LedgerEntry]] = defaultdict(list)
        for entry in self.ledger:
            if entry.is_model_call:  # a counterfactual control's calls are its own episode's
                usage[(entry.case_id, entry.system, entry.epoch, entry.control)].append(entry)
        epochs = range(1, run_epochs(self.config) + 1)
        controls = system_controls(self.config["recipe"])
        episodes = [
            (case_id, system, epoch, None)
            for case_id, system, epoch in itertools.product(self.config["cases"], self.systems, epochs)
        ] + [
            (case_id, system, epoch, kind)
            for system in self.systems
            for kind in controls.get(system, [])
            for case_id, epoch in itertools.product(self.config["cases"], epochs)
        ]
        rows = []
        for case_id, system, epoch, control in episodes:
            key = result_key(case_id, system, epoch, control)
            record = self.records.get(key)
            calls = usage.get((case_id, system, epoch, control), [])
            rows.append(
                EpisodeRow(
                    key=key,
                    case_id=case_id,
                    system=system,
                    epoch=epoch,
                    control=control,
                    status=record.status if record else "missing",
                    error=record.error if record else None,
                    scores=dict(record.scores) if record else {},
                    degraded=dict(Counter(d.kind for d in record.degraded for _ in range(d.count))) if record else {},
                    latency_s=record.latency_s if record else None,
                    resumed_from=record.resumed_from if record else None,
                    calls=len(calls),
                    tokens=sum(e.prompt_tokens + e.completion_tokens for e in calls),
                    ingest_calls=sum(usage_kind(e) == MEMORY for e in calls),
                    page=f"{EPISODES_DIR}/{episode_page(key)}",
                )
            )
        return rows

    def run_view(self) -> RunView:
        rows = self.rows()
        judges = [j.get("label") or j["name"] for j in self.config["recipe"].get("judges", [])]
        judges += [name for row in rows for name in row.scores if name not in judges]
        kinds = sorted({kind for row in rows for kind in row.degraded})
        return RunView(
            run_id=self.config["run_id"],
            recipe=self.config["recipe"]["name"],
            dry_run=any(r.dry_run for r in self.records.values()) or any(e.dry_run for e in self.ledger),
            systems=self.systems,
            epochs=run_epochs(self.config),
            judges=list(dict.fromkeys(judges)),
            kinds=kinds,
            controls=list(dict.fromkeys(row.control for row in rows if row.control is not None)),
            episodes=rows,
        )

    def episode(self, row: EpisodeRow) -> EpisodeView:
        try:
            steps = load_trace(self.path, row.case_id, row.system, row.epoch, row.control, ledger=self.ledger)
        except ConfigError as exc:  # no checkpoints for it: the page says why its timeline is empty
            return EpisodeView(row=row, lanes=[], steps=[], span_s=0.0, trace_error=str(exc), record=self._record(row))
        lanes, views = self._steps(steps, row.key)
        stop = _stop(views) if row.resumed_from else None
        span, stopped_at = _layout(views, stop)
        return EpisodeView(
            row=row,
            lanes=lanes,
            steps=views,
            span_s=span,
            stopped_s=round(stop[1] - stop[0], 3) if stop else 0.0,
            stopped_at=stopped_at,
            record=self._record(row),
        )

    def _record(self, row: EpisodeRow) -> dict[str, Any] | None:
        record = self.records.get(row.key)
        return record.model_dump(mode="json") if record else None

    def _steps(self, steps: list[Step], thread_id: str) -> tuple[list[str], list[StepView]]:
        # the lane of a step is its checkpoint's namespace: `runs.trace` names a step by its graph
        # (`episode › deep_research › researcher`), the namespace also tells parallel instances apart
        namespace_of = {
            (_where(ns), item.checkpoint["ts"]): ns for ns, item in _checkpoints(self.folder.checkpoints, thread_id)
        }
        instances: dict[str, list[str]] = defaultdict(list)  # where -> its namespaces, in order of appearance
        for step in steps:
            ns = namespace_of.get((step.where, step.ts), step.where)
            if ns not in instances[step.where]:
                instances[step.where].append(ns)

        def lane(step: Step) -> str:
            namespaces = instances[step.where]
            ns = namespace_of.get((step.where, step.ts), step.where)
            return step.where if len(namespaces) == 1 else f"{step.where} #{namespaces.index(ns) + 1}"

        last_ts: dict[str, float] = {}
        seen_calls: set[str] = set()  # a call two parallel steps could both claim is shown once, at the first
        views = []
        for step in steps:
            name = lane(step)
            end = datetime.fromisoformat(step.ts).timestamp()
            start = last_ts.get(name, end)
            last_ts[name] = end
            calls = []
            for call in step.calls:
                if call.entry.call_id in seen_calls:
                    continue
                seen_calls.add(call.entry.call_id)
                calls.append(_call_view(call.entry, call.messages, call.answer))
            views.append(
                StepView(
                    index=step.index,
                    where=step.where,
                    lane=name,
                    source=step.source,
                    nodes=step.nodes,
                    ts=step.ts,
                    start=min([start, *(c.start for c in calls)]),
                    end=end,
                    changed={k: _json_text(v) for k, v in step.changed.items()},
                    calls=calls,
                )
            )
        lanes = list(dict.fromkeys(v.lane for v in views))
        return lanes, views


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + f" … ({len(text) - VALUE_CHARS} more characters)"


def _json_text(value: Any) -> str:
    plain = _plain(value)
    text = plain if isinstance(plain, str) else json.dumps(plain, indent=2, ensure_ascii=False, default=str)
    return _cut(text)


def _call_view(entry: LedgerEntry, messages: list[dict[str, Any]] | None, answer: str | None) -> CallView:
    return CallView(
        call_id=entry.call_id,
        node=entry.node,
        role=entry.role,
        model=entry.model,
        kind=entry.kind,
        status=entry.status,
        error=entry.error,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
        latency_ms=entry.latency_ms,
        cache_hit=entry.cache_hit,
        attempts=entry.attempts,
        cost_usd=entry.cost_usd,
        messages=[{"role": str(m.get("role")), "content": _cut(str(m.get("content", "")))} for m in messages]
        if messages is not None
        else None,
        answer=_cut(answer) if answer is not None else None,
        start=entry.ts - entry.latency_ms / 1000,  # a ledger line is written as its call returns
        end=entry.ts,
    )


def _stop(steps: list[StepView]) -> tuple[float, float] | None:
    """A resumed episode's stop: the longest stretch between two moments of its record (a checkpoint
    written, a call started or returned) — the process that ran it was stopped there, and the one
    that resumed it started at its end. None when it has no two moments."""
    moments = sorted({s.end for s in steps} | {t for s in steps for c in s.calls for t in (c.start, c.end)})
    gaps = [(later - earlier, earlier, later) for earlier, later in zip(moments, moments[1:])]
    if not gaps:
        return None
    _, earlier, later = max(gaps)
    return earlier, later


def _layout(steps: list[StepView], stop: tuple[float, float] | None = None) -> tuple[float, float | None]:
    """Place steps and calls on the timeline (% of the episode's span), with a resumed episode's stop
    cut out (a step that spans it keeps the work on each side); the span in seconds, and where (%)
    the stop was cut (None: no stop)."""
    if not steps:
        return 0.0, None
    items: list[StepView | CallView] = [*steps, *(c for s in steps for c in s.calls)]
    t0 = min(item.start for item in items)

    def at(t: float) -> float:
        """Seconds of work from t0 to t: the stop does not count."""
        if stop is None or t <= stop[0]:
            return t - t0
        return t - t0 - (min(t, stop[1]) - stop[0])

    span = max(at(item.end) for item in items)
    scale = 100 / span if span > 0 else 0.0
    for item in items:
        item.left = round(at(item.start) * scale, 3)
        item.width = round(max((at(item.end) - at(item.start)) * scale, 0.0), 3)
    return span, (round(at(stop[0]) * scale, 3) if stop is not None else None)


# ----------------------------------------------------------------------------- rendering


def _environment():
    env = environment(strict=True)
    env.filters["score"] = lambda v: "–" if v is None else f"{v:.3f}"
    return env


def _redacted(html: str) -> str:
    return active_redactor().redact(html)  # no key on a page, even one a prompt or an error quoted


def render_index(data: RunViewData, report_href: str = "report.html") -> str:
    """The index page; `report_href` is where its link to the run's report.html points."""
    html = _environment().get_template("view_index.html.j2").render(run=data.run_view(), report_href=report_href)
    return _redacted(html)


def render_episode(data: RunViewData, page: str) -> str | None:
    """The page of the episode whose file name is `page`; None when the run has no such episode."""
    run = data.run_view()
    row = next((r for r in run.episodes if r.page == f"{EPISODES_DIR}/{page}"), None)
    if row is None:
        return None
    html = _environment().get_template("view_episode.html.j2").render(run=run, episode=data.episode(row))
    return _redacted(html)


def write_static(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the view of `run_dir` into `out_dir` (index.html and one page per episode); its index."""
    data = RunViewData(run_dir)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--static {out_dir}: exists and is not a folder")
    no_follow.make_folders(out / EPISODES_DIR)
    run = data.run_view()
    env = _environment()
    for row in run.episodes:
        html = env.get_template("view_episode.html.j2").render(run=run, episode=data.episode(row))
        write_atomically(out / row.page, _redacted(html))
    index = out / "index.html"
    report_href = Path(os.path.relpath(data.folder.report.resolve(), out.resolve())).as_posix()
    write_atomically(index, _redacted(env.get_template("view_index.html.j2").render(run=run, report_href=report_href)))
    return index
