"""The experiment runner: expand a recipe into (case x system) episodes and run them.

Episodes run concurrently (asyncio, bounded by `run.concurrency`; each model further bounded by
its own settings). Each episode's graph is checkpointed in SQLite, each finished result appended
atomically with an idempotent key, so a killed run resumed with the same `--out` folder loses
nothing and counts nothing twice. Failures are recorded with their reason.

A run folder holds config.json, results.jsonl, summary.json, ledger.jsonl, report.html and
checkpoints.sqlite.
"""

from __future__ import annotations

import asyncio
import platform
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from agents.judges.base import check_judge_fit, create_judge
from agents.ledger import call_tags, ledger_totals, read_ledger
from benchmarks.case import Case
from benchmarks.data_files import cache_dir
from benchmarks.errors import ConfigError
from benchmarks.registry import load_cases
from graphs.context import EpisodeContext, SystemSpec
from graphs.episode import build_episode_graph
from graphs.resources import release, resources_for
from runs.judging import judge_comparisons
from runs.recipe import Recipe
from runs.report import write_report
from runs.results import ContextUsed, ResultRecord, ResultsFile, result_key, write_json_atomic
from runs.summary import summarize
from tools.config import WebConfig
from tools.web import check_web_config


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def results(self) -> Path:
        return self.path / "results.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.jsonl"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints.sqlite"


def new_run_id(recipe: Recipe) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{recipe.name}-{stamp}-{secrets.token_hex(2)}"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("atelier", "litellm", "langgraph", "langchain-core", "pydantic", "chromadb", "mem0ai"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            continue
    return out


class Runner:
    def __init__(self, recipe: Recipe, folder: Path | None = None, *, progress: bool = True) -> None:
        self.recipe = recipe
        existing = folder is not None and (folder / "config.json").exists()
        self.run_id = _read_run_id(folder) if existing else (folder.name if folder else new_run_id(recipe))
        self.folder = RunFolder(folder or Path(recipe.run.out_dir) / self.run_id)
        self.progress = progress
        self.cache_dir = (recipe.cache.dir or str(cache_dir() / "llm")) if recipe.cache.enabled else None

    @property
    def web(self) -> WebConfig:
        """The recipe's web; unless it names a cache, recorded in the run folder so the run's
        searches and pages can be replayed offline (`[web] mode = "replay"`, `cache_dir` = that folder)."""
        web = self.recipe.web
        return web if web.cache_dir else web.model_copy(update={"cache_dir": self.folder.path / "web"})

    def context_for(self, system: SystemSpec) -> EpisodeContext:
        return EpisodeContext(
            run_id=self.run_id,
            run_dir=str(self.folder.path),
            cache_dir=self.cache_dir,
            models=self.recipe.role_models(),
            system=system,
            judges=self.recipe.judges,
            web=self.web,
        )

    async def run(self) -> RunFolder:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        recipe = self.recipe
        b = recipe.benchmark
        check_web_config(self.web)  # a provider without its API key fails here, before any episode
        self._check_resumable()
        cases = load_cases(b.name, b.split, b.setting, b.limit, b.options, seed=recipe.seed)
        # a judge the cases cannot feed is refused here, before any episode
        check_judge_fit([create_judge(j) for j in recipe.judges], cases, b.name, [s.name for s in recipe.systems])
        self.folder.path.mkdir(parents=True, exist_ok=True)
        contexts = {s.name: self.context_for(s) for s in recipe.systems}
        dry_run = any(resources_for(c).gateway.dry_run for c in contexts.values())
        config = self._config(cases, dry_run)
        write_json_atomic(self.folder.config, config)

        results = ResultsFile(self.folder.results)
        done = {k for k, r in results.load(repair=True).items() if r.ok}
        todo = [(case, system) for system in recipe.systems for case in cases
                if result_key(case.id, system.name) not in done]

        async with AsyncSqliteSaver.from_conn_string(str(self.folder.checkpoints)) as saver:
            graphs = {p: build_episode_graph(p, checkpointer=saver) for p in {s.pipeline for s in recipe.systems}}
            limit = asyncio.Semaphore(recipe.run.concurrency)

            async def one(case: Case, system: SystemSpec) -> ResultRecord:
                async with limit:
                    record = await self._episode(graphs[system.pipeline], case, system, contexts[system.name])
                results.append(record)
                return record

            with _progress(self.progress, total=len(cases) * len(recipe.systems), done=len(done)) as bar:
                tasks = [asyncio.create_task(one(case, system)) for case, system in todo]
                for finished in asyncio.as_completed(tasks):
                    record = await finished
                    bar.advance(record.ok)
        # judges comparing two systems' responses (LaMP-QA pairwise) run once both exist
        by_id = {c.id: c for c in cases}
        for record in await judge_comparisons(results.load(), by_id, contexts, recipe.run.concurrency):
            results.append(record)
        for context in contexts.values():
            await release(context)
        self.finish(config)
        return self.folder

    async def _episode(self, graph, case: Case, system: SystemSpec, context: EpisodeContext) -> ResultRecord:
        key = result_key(case.id, system.name)
        config = {"configurable": {"thread_id": key}}
        started = time.perf_counter()
        base = dict(key=key, run_id=self.run_id, case_id=case.id, system=system.name, benchmark=case.benchmark,
                    user_id=case.user_id, setting=system.setting or case.setting,
                    dry_run=resources_for(context).gateway.dry_run)
        try:
            with call_tags(case=case.id, system=system.name):
                snapshot = await graph.aget_state(config)
                if snapshot.next:  # interrupted earlier: continue from the last checkpoint
                    out = await graph.ainvoke(None, config, context=context)
                else:
                    out = await graph.ainvoke({"case": case}, config, context=context)
        except Exception as exc:  # noqa: BLE001 - one failed episode is recorded and the run goes on
            return ResultRecord(**base, status="error", error=f"{type(exc).__name__}: {exc}",
                                latency_s=time.perf_counter() - started, finished_at=time.time())
        user_context = out.get("user_context")
        judgments = out.get("judgments", [])
        return ResultRecord(
            **base,
            status="ok",
            response=out["response"],
            user_context=ContextUsed(**user_context.model_dump(include={"backend", "form", "event_ids", "tokens"}))
            if user_context else None,
            judgments=judgments,
            scores={j.judge: j.score for j in judgments},
            latency_s=round(time.perf_counter() - started, 4),
            finished_at=time.time(),
        )

    # what must not change between a run and its resumption: it decides what an episode computes
    _RESUME_KEYS = ("seed", "models", "systems", "judges", "web")

    def _check_resumable(self) -> None:
        previous = (_read_json(self.folder.config) or {}).get("recipe")
        if previous is None:
            return
        current = self.recipe.model_dump(mode="json")
        changed = [k for k in self._RESUME_KEYS if previous.get(k) != current.get(k)]
        benchmark = ("name", "split", "setting", "options")
        changed += [f"benchmark.{k}" for k in benchmark if previous["benchmark"].get(k) != current["benchmark"].get(k)]
        if changed:
            raise ConfigError(
                f"{self.folder.path} holds a run of a different recipe ({', '.join(changed)} changed); "
                "resume it with the recipe it was started with, or choose a new --out folder"
            )

    def _config(self, cases: list[Case], dry_run: bool) -> dict[str, Any]:
        previous = _read_json(self.folder.config)
        return {
            "run_id": self.run_id,
            "started_at": (previous or {}).get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "dry_run": dry_run,
            "recipe": self.recipe.model_dump(mode="json"),
            "cache_dir": self.cache_dir,
            "cases": [c.id for c in cases],
            "versions": _versions(),
        }

    def finish(self, config: dict[str, Any]) -> None:
        """Write summary.json and report.html from what results.jsonl and ledger.jsonl hold."""
        records = list(ResultsFile(self.folder.results).load().values())
        judges = [create_judge(j) for j in self.recipe.judges]
        summary = summarize(records, [s.name for s in self.recipe.systems], [j.key for j in judges],
                            seed=self.recipe.seed, aggregates={j.key: j.aggregate for j in judges})
        ledger = read_ledger(self.folder.ledger) if self.folder.ledger.exists() else []
        summary = {
            "run_id": self.run_id,
            "dry_run": config["dry_run"],
            "benchmark": self.recipe.benchmark.model_dump(),
            "n_cases": len(config["cases"]),
            "judges": [j.key for j in judges],
            **summary,
            "ledger": ledger_totals(ledger),
        }
        write_json_atomic(self.folder.summary, summary)
        write_report(self.folder.report, config=config, summary=summary, records=records)


def _read_json(path: Path) -> dict[str, Any] | None:
    import json

    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _read_run_id(folder: Path) -> str:
    return (_read_json(folder / "config.json") or {}).get("run_id") or folder.name


class _progress:
    """A rich progress bar over episodes (ok / failed), or nothing when disabled."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.enabled, self.total, self.done = enabled, total, done
        self.failed = 0

    def __enter__(self) -> "_progress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("episodes"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("run", total=self.total, completed=self.done, failed=0)
        return self

    def advance(self, ok: bool) -> None:
        self.failed += not ok
        if self.enabled:
            self._bar.update(self._task, advance=1, failed=self.failed)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._bar.stop()


def run_recipe(recipe: Recipe, folder: Path | None = None, *, progress: bool = True) -> RunFolder:
    return asyncio.run(Runner(recipe, folder, progress=progress).run())
