"""The experiment runner: expand a recipe into (case x system x epoch) episodes and run them.

`[run] epochs = k` runs each (case, system) k times, each epoch with seeds of its own
(`epoch_context`); `[run] budget_usd` starts no episode that could take spend past it
(`runs.execution.budget.Budget`: each episode reserves its forecast high end until it ends; one that
does not fit waits for the episodes in flight).

Episodes run concurrently (bounded by `run.concurrency`; each model further bounded by its own
settings) on the recipe's executor: asyncio in this process, or a Ray cluster (`runs/execution/executors/`).
Each episode's graph is checkpointed in SQLite, each finished result appended atomically with an
idempotent key, so a killed run resumed with the same `--out` folder loses nothing and counts
nothing twice. Failures are recorded with their reason.

A run folder holds config.json, results.jsonl, summary.json, ledger.jsonl, report.html and
checkpoints.sqlite.
"""

from __future__ import annotations

import asyncio
import platform
import secrets
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atelier.agents.judges.base import Judge, check_judge_fit, create_judge
from atelier.agents.models.answer_contract import recording_answers
from atelier.agents.models.ledger import LedgerEntry, call_tags, capture_calls, read_ledger
from atelier.agents.models.spend import BUDGET_REACHED
from atelier.benchmarks.case import Case
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl
from atelier.benchmarks.common.offline import apply_offline_defaults
from atelier.benchmarks.common.redaction import Redactor, redacting
from atelier.benchmarks.common.waiting import Waits, watching
from atelier.benchmarks.contract import check_cases
from atelier.benchmarks.controls import control_name
from atelier.graphs.context import BenchmarkRef, EpisodeContext, SystemSpec, check_hidden_facets
from atelier.graphs.controls import checked_for_leaks
from atelier.graphs.episode import episode_graph_for
from atelier.graphs.heap import settled_heap
from atelier.graphs.inputs import forget_cases, remember_cases, setting_of
from atelier.graphs.persistence import no_space, out_of_space, run_checkpointer
from atelier.graphs.pipelines import check_systems_available
from atelier.graphs.resources import guard_spending, release, resources_for, run_ledger
from atelier.graphs.simulate import run_with_simulated_user
from atelier.runs.execution.budget import Budget, spent_in
from atelier.runs.execution.controls import ControlEpisodes, control_of
from atelier.runs.execution.cost import plan_budget
from atelier.runs.execution.executors import Episode, open_executor
from atelier.runs.execution.judging import judge_again, judge_comparisons, judgments_due
from atelier.runs.execution.preflight import preflight
from atelier.runs.folder.epochs import epoch_context, epoch_of
from atelier.runs.folder.layout import RunFolder, case_digest, expected_keys, stored_config
from atelier.runs.folder.lock import RunFolderLock
from atelier.runs.folder.recipe import Recipe, plugins_used
from atelier.runs.folder.results import ContextUsed, ResultRecord, ResultsFile, result_key, write_json_atomic
from atelier.runs.folder.resume import check_resume, output_digest
from atelier.runs.reading.finish import finish_run, searched_web
from atelier.runs.reading.outcome import RunOutcome
from atelier.tools.config import WebConfig
from atelier.tools.web import check_web_config


def new_run_id(recipe: Recipe) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{recipe.name}-{stamp}-{secrets.token_hex(2)}"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("atelier", "litellm", "langgraph", "langchain-core", "pydantic", "chromadb", "mem0ai"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            continue
    return out


def cut_by_budget(record: ResultRecord) -> bool:
    """Whether the budget refused a call of this episode (its system's or a judge's)."""
    said = [record.error or "", *(j.error or "" for j in record.judgments if j.failed)]
    return any(BUDGET_REACHED in text for text in said)


class Runner:
    def __init__(
        self,
        recipe: Recipe,
        folder: Path | None = None,
        *,
        progress: bool = True,
        say: Callable[[str], None] | None = None,
        preflight: bool = True,
        lock: RunFolderLock | None = None,
    ) -> None:
        """`lock`: the run folder's lock, when the caller took it already (the CLI does, first); the
        run releases it when it ends."""
        self.recipe = recipe
        if folder is not None and folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder} is a file, not a run folder: give --out a new or existing run folder")
        existing = folder is not None and (folder / "config.json").exists()
        stored = stored_config(folder / "config.json") if existing and folder is not None else None
        self.run_id = (stored and stored.run_id) or (folder.name if folder else new_run_id(recipe))
        self.folder = RunFolder(folder or Path(recipe.run.out_dir) / self.run_id)
        self.lock = lock or RunFolderLock(self.folder.path)
        self.progress = progress
        self.say = say or (lambda message: None)
        self.preflight = preflight
        self.cache_dir = recipe.cache.location
        self.redactor = Redactor.for_settings(recipe)  # every key the run knows: blanked from all it writes
        self.outcome: RunOutcome | None = None
        self.expected = 0  # episodes of the current recipe, known once the cases are loaded
        self.already_done = 0  # of those, finished in an earlier session of this run folder
        self.budget: Budget | None = None  # `[run] budget_usd`, with what it holds once the run started

    @property
    def web(self) -> WebConfig:
        """The recipe's web, recorded in the run folder so the run's searches and pages can be replayed
        offline (`[web] mode = "replay"`, `cache_dir` = that folder): there unless the recipe names a
        cache, and copied there from the cache it names (a replay of another run included)."""
        web, own = self.recipe.web, self.folder.path / "web"
        if not web.cache_dir:
            return web.model_copy(update={"cache_dir": own})
        return web.model_copy(update={"copy_dir": own})

    def context_for(self, system: SystemSpec) -> EpisodeContext:
        return EpisodeContext(
            run_id=self.run_id,
            run_dir=str(self.folder.path),
            cache_dir=self.cache_dir,
            models=self.recipe.role_models(),
            system=system,
            judges=self.recipe.judges,
            web=self.web,
            seed=self.recipe.seed,
            benchmark=BenchmarkRef(
                name=self.recipe.benchmark.name,
                split=self.recipe.benchmark.split,
                options=self.recipe.benchmark.options,
            ),
            # [user_sim] clarify: systems ask and the simulated user answers (graphs/simulate.py); else they skip it
            clarify_answerer="simulated_user" if self.recipe.user_sim.clarify else "none",
        )

    def load_cases(self) -> list[Case]:
        return self.recipe.cases()

    async def run(self) -> RunFolder:
        apply_offline_defaults()  # a run started from Python: before the libraries its episodes drive load
        recipe = self.recipe
        recipe.check_roles_named()  # no role silently scripted beside a real model
        check_web_config(self.web)  # a provider without its API key fails here, before any episode
        check_systems_available(recipe.systems)  # so does a system whose optional extra is missing
        self.lock.acquire()  # one process per run folder, before reading anything in it (the CLI took it first)
        try:
            with redacting(self.redactor):  # the ledger, results, checkpoints, summary and report use it
                return await self._run()
        except (sqlite3.Error, OSError) as exc:
            if out_of_space(self.folder.path, exc):  # bad input (a full --out), not a bug: what is written stays
                raise no_space(self.folder.path, exc) from None
            raise
        finally:
            self.lock.release()

    async def _run(self) -> RunFolder:
        recipe = self.recipe
        judgments_changed = self._check_resumable()
        cases = self.load_cases()
        digests = self._check_cases_unchanged(cases)
        check_hidden_facets(cases, recipe.systems)
        controls = ControlEpisodes.plan(recipe, cases, self.context_for)  # `[run] controls`, or none
        check_system_settings(cases, recipe)
        # a budget over an unknown price is refused before any call; the forecast's dry run calls no provider
        budget = (
            await asyncio.to_thread(plan_budget, recipe, dry_run_ledger, self.folder.path)
            if recipe.run.budget_usd is not None
            else None
        )
        if self.preflight:  # models answer, keys, data, judge fit, the web: or nothing starts
            passed = await preflight(recipe, cases)
        else:  # a judge the cases cannot feed is refused all the same
            passed = None
            check_judge_fit(
                [create_judge(j) for j in recipe.judges], cases, recipe.benchmark.name, [s.name for s in recipe.systems]
            )
        no_follow.make_folders(self.folder.path)
        contexts = {s.name: self.context_for(s) for s in recipe.systems}
        epochs = range(1, recipe.run.epochs + 1)
        epoch_contexts = {
            (s.name, e): epoch_context(contexts[s.name], e, recipe.run.reuse_judgments)
            for s in recipe.systems
            for e in epochs
        }
        config = self._config(cases, digests) | controls.described(cases)
        write_json_atomic(self.folder.config, config)

        for path, consequence in (
            (self.folder.results, "its episode is run again"),
            (self.folder.ledger, "that call is missing from the ledger"),
        ):
            _mend_torn_line(path, consequence)
        read_ledger(self.folder.ledger)  # a bad line is reported now, not after every episode has run
        if passed is not None:
            self.say(f"preflight ok ({passed.seconds:.1f} s)")
        if passed is not None and passed.calls:
            with no_follow.open_file(self.folder.ledger, "a") as fh:  # the probes cost what calls cost
                fh.writelines(
                    self.redactor.redact(e.model_copy(update={"run_id": self.run_id}).model_dump_json()) + "\n"
                    for e in passed.calls
                )
        if budget is not None:  # what the run folder's calls cost so far (earlier sessions, the probes)
            budget.spent_before = spent_in(read_ledger(self.folder.ledger))
            if budget.hold_calls:  # every priced call of the run's gateways holds its bound on it
                guard_spending(next(iter(contexts.values())), budget)
        self.budget = budget
        web = searched_web(recipe)
        if web and web.get("warning"):
            self.say(f"warning: {web['warning']}")
        remember_cases(self.run_id, cases)  # episodes' state holds only (benchmark, case id)
        results = ResultsFile(self.folder.results)
        keys = set(expected_keys([c.id for c in cases], [s.name for s in recipe.systems], recipe.run.epochs))
        keys |= set(controls.keys)
        latest = {k: r for k, r in results.load().items() if k in keys}
        made_by = {s.name: output_digest(recipe.model_dump(mode="json"), s.name) for s in recipe.systems}
        for stored in latest.values():
            if stored.made_by is not None and stored.made_by != made_by[stored.system]:
                raise ConfigError(
                    f"{self.folder.results}: episode {stored.key} was made by another recipe than this one "
                    "(its seed, benchmark, system or models differ) though config.json says otherwise; restore "
                    "the folder's config.json and resume with its recipe, or choose a new --out folder"
                )
        done = {k for k, r in latest.items() if r.ok}
        todo: list[tuple[Case, SystemSpec, int, str | None]] = [  # epochs outermost: a run stopped by its
            (case, system, epoch, None)  # budget has whole epochs rather than whole systems
            for epoch in epochs
            for system in recipe.systems
            for case in cases
            if result_key(case.id, system.name, epoch) not in done
        ] + controls.todo(cases, recipe.systems, done)
        rejudge = self._to_rejudge(latest, cases, contexts, judgments_changed)
        self.expected, self.already_done = len(keys), len(done)
        if done:
            self.say(
                f"resuming {self.folder.path}: {len(done)} of {len(keys)} episodes already done, "
                f"{len(todo)} to run" + (f", {len(rejudge)} to judge again" if rejudge else "")
            )

        try:
            async with run_checkpointer(self.folder.path) as saver:
                graph = episode_graph_for(recipe.systems, checkpointer=saver)
                limit = asyncio.Semaphore(recipe.run.concurrency)

                async def one(case: Case, system: SystemSpec, epoch: int, control: str | None) -> ResultRecord | None:
                    context = (
                        controls.context(system.name, epoch, control)
                        if control
                        else epoch_contexts[(system.name, epoch)]
                    )
                    async with limit:
                        name = control_name(system.name, control) if control else system.name  # its forecast line
                        reservation = await budget.start(name) if budget is not None else 0.0
                        if reservation is None:  # the budget cannot hold it: not started, left for a resume
                            return None
                        try:
                            record = await executor.run(Episode(case, system, context))
                        except BaseException:
                            if budget is not None:  # what it spent is unknown
                                budget.finish(name, reservation, None)
                            raise
                        record = record.model_copy(update={"made_by": made_by[system.name]})
                        if budget is not None:
                            cut = cut_by_budget(record)  # a call of it was refused: not a whole episode
                            budget.finish(name, reservation, record.cost_usd, whole=not cut)
                            if cut:  # left for a resume, as one not started (its answered calls are cached)
                                await saver.adelete_thread(record.key)
                                return None
                    if record.ok:
                        saver.drop_pending_writes(record.key)  # and commits: its checkpoints are on disk first
                    await asyncio.to_thread(results.append, record)  # its fsync must not stall other episodes
                    return record

                async def judged_again(stored: ResultRecord, case: Case, judges: list[Judge]) -> ResultRecord | None:
                    # judges that changed leave no judgment standing: the old ones are dropped, not mixed in
                    kept = stored.model_copy(update={"judgments": [], "scores": {}}) if judgments_changed else stored
                    context = (
                        controls.context(stored.system, stored.epoch, stored.control)
                        if stored.control
                        else epoch_contexts[(stored.system, stored.epoch)]
                    )
                    name = control_name(stored.system, stored.control) if stored.control else stored.system
                    async with limit:
                        reservation = await budget.start(name) if budget is not None else 0.0
                        if reservation is None:
                            return None
                        with capture_calls() as calls:
                            try:
                                record = kept.with_judgments(await judge_again(case, stored, context, judges))
                            finally:
                                if budget is not None:
                                    budget.finish(name, reservation, spent_in(calls), whole=False)
                    await asyncio.to_thread(results.append, record)
                    return record

                waits = Waits()
                progress = EpisodeProgress(
                    self.progress,
                    total=len(keys),
                    done=len(done) - len(rejudge),
                    ledger=run_ledger(next(iter(contexts.values()))) if contexts else None,
                    budget=budget,
                    waits=waits,
                )
                # imports done, graph compiled: full collections now skip all of it; what starts
                # slowly says so on the progress bar (tasks made inside the block inherit `watching`)
                with settled_heap(), watching(waits):
                    async with self._executor(graph) as executor:
                        with progress as bar:
                            tasks = [asyncio.create_task(one(*episode)) for episode in todo]
                            tasks += [
                                asyncio.create_task(judged_again(stored, case, judges))
                                for stored, case, judges in rejudge
                            ]
                            try:
                                for finished in asyncio.as_completed(tasks):
                                    record = await finished
                                    if record is not None:
                                        bar.advance(record.ok)
                            finally:  # one raised (a full disk): the others stop, their errors collected
                                for task in tasks:
                                    task.cancel()
                                await asyncio.gather(*tasks, return_exceptions=True)
            if rejudge:
                print(
                    f"note: judged {len(rejudge)} stored response{'s' * (len(rejudge) != 1)} again "
                    "(their systems did not run again)",
                    file=sys.stderr,
                )
            # judges comparing two systems' responses (LaMP-QA pairwise) run once both exist; not on a run
            # its budget stopped (they run when a larger budget resumes it)
            if budget is None or not budget.reached:
                by_id = {c.id: c for c in cases}
                for record in await judge_comparisons(results.load(), by_id, epoch_contexts, recipe.run.concurrency):
                    results.append(record)
        finally:
            for context in [*epoch_contexts.values(), *controls.contexts.values()]:
                await release(context)
            forget_cases(self.run_id)
        self.finish(config, cases)
        return self.folder

    def _executor(self, graph):
        """Where this run's episodes execute (the recipe's `[run] executor`), open for the block."""
        return open_executor(
            self.recipe, self._episode, graph, run_id=self.run_id, run_dir=self.folder.path, progress=self.progress
        )

    @staticmethod  # what every executor runs, in this process or on a cluster's worker
    async def _episode(graph, case: Case, system: SystemSpec, context: EpisodeContext) -> ResultRecord:
        epoch, control = epoch_of(context, system), control_of(context)
        key = result_key(case.id, system.name, epoch, control)
        config = {"configurable": {"thread_id": key}}
        started = time.perf_counter()
        base = dict(
            key=key,
            run_id=context.run_id,
            case_id=case.id,
            system=system.name,
            benchmark=case.benchmark,
            user_id=case.user_id,
            setting=setting_of(case, system),
            epoch=epoch,
            control=control,
        )
        out: dict[str, Any] | Exception
        # what the system's model answers broke of the provider contract (a judgment keeps its judge's)
        with capture_calls() as calls, recording_answers() as answers:
            try:
                base["resumed_from"] = await Runner._resumed_from(graph, config)
                with call_tags(case=case.id, system=system.name, epoch=str(epoch), control=control):
                    out = await run_with_simulated_user(graph, case, config, context)
                    if control is not None:  # an answer knowing the case's own user, given another's context
                        out["response"] = await checked_for_leaks(
                            case, context, out["response"], out.get("user_context")
                        )
            except Exception as exc:
                if Runner._run_stopping(graph):
                    # Ctrl-C closed the run's checkpoints and stores under the running episode: it did
                    # not fail. Left unrecorded, the resumed run continues it from its last checkpoint.
                    raise asyncio.CancelledError(f"the run stopped during episode {key}") from exc
                out = exc
        base["contract"] = [*answers, *([out.degradation] if isinstance(out, ContractBroken) else [])]
        base["dry_run"] = any(call.dry_run for call in calls)  # some call of this session was scripted
        # what this session of the episode cost (a budget releases its reservation for it); unknown when
        # a provider call had no price
        unpriced = any(c.is_model_call and not c.cache_hit and c.status == "ok" and c.cost_usd is None for c in calls)
        base["cost_usd"] = None if unpriced else round(spent_in(calls), 8)
        if isinstance(out, Exception):
            return ResultRecord(
                **base,
                status="error",
                error=f"{type(out).__name__}: {out}",
                latency_s=time.perf_counter() - started,
                finished_at=time.time(),
            )
        user_context = out.get("user_context")
        judgments = out.get("judgments", [])
        return ResultRecord(
            **base,
            status="ok",
            response=out["response"],
            user_context=ContextUsed(
                **user_context.model_dump(
                    include={"backend", "form", "event_ids", "tokens", "text", "degraded", "share"}
                )
            )
            if user_context
            else None,
            judgments=judgments,
            scores={j.judge: j.score for j in judgments},
            latency_s=round(time.perf_counter() - started, 4),
            ingest_s=out.get("ingest_s"),
            finished_at=time.time(),
        )

    @staticmethod
    async def _resumed_from(graph, config: dict[str, Any]) -> str | None:
        """The step an episode continues from when an earlier process left it unfinished (its last
        checkpoint's next nodes, e.g. `recall`); None when it starts afresh."""
        saver = graph.checkpointer
        if saver is None or await saver.aget_tuple(config) is None:
            return None
        return ", ".join((await graph.aget_state(config)).next) or None

    @staticmethod
    def _run_stopping(graph) -> bool:
        """Whether the run is shutting down under its episodes (Ctrl-C): the episode's task is being
        cancelled, or the run's checkpoint database is closed already (the run closes it, then its
        stores, while episodes still run; what fails then is the shutdown, not the episode)."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return True
        conn = getattr(graph.checkpointer, "conn", None)
        if not isinstance(conn, sqlite3.Connection):
            return False
        try:
            conn.total_changes  # noqa: B018 - any use of a closed connection raises
        except sqlite3.ProgrammingError:
            return True
        return False

    def _check_resumable(self) -> bool:
        """Refuses a folder whose outputs another recipe made (see `runs.resume`). True when the
        judges changed since: every stored response is then judged again."""
        stored = stored_config(self.folder.config)
        if stored is None or stored.recipe is None:
            if ResultsFile(self.folder.results).load():  # outputs of a recipe no one can name any more
                raise ConfigError(
                    f"{self.folder.path} holds results but no config.json saying which recipe made them; "
                    "restore its config.json, or choose a new --out folder"
                )
            return False
        try:
            check = check_resume(stored.recipe, self.recipe.model_dump(mode="json"))
        except (ValidationError, ValueError, TypeError, AttributeError) as exc:  # edited by hand, or another version
            raise DataError(
                f"its recipe cannot be read back ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                "restore it, or choose a new --out folder",
                file=self.folder.config,
            ) from None
        if check.refused:
            raise ConfigError(
                f"{self.folder.path} holds a run of a different recipe ({', '.join(check.refused)} changed); "
                "resume it with the recipe it was started with, or choose a new --out folder"
            )
        return check.judgments_changed

    def _to_rejudge(
        self,
        latest: dict[str, ResultRecord],
        cases: list[Case],
        contexts: dict[str, EpisodeContext],
        judgments_changed: bool,
    ) -> list[tuple[ResultRecord, Case, list[Judge]]]:
        """Stored responses to judge again, with the judges to do it: every judge when the judges
        changed, else those whose judgment is missing or failed (comparative judges are left to
        `judge_comparisons`, which redoes theirs the same way)."""
        by_id = {case.id: case for case in cases}
        out = []
        for record in latest.values():
            if record.ok and record.case_id in by_id:
                judges = resources_for(contexts[record.system]).judges
                due = [j for j in judges if not j.comparative] if judgments_changed else judgments_due(record, judges)
                if due or judgments_changed:
                    out.append((record, by_id[record.case_id], due))
        return out

    def _check_cases_unchanged(self, cases: list[Case]) -> dict[str, str]:
        """Each case's digest; a ConfigError when a case the run began with now reads otherwise (the
        cases file edited, the data behind the benchmark replaced): its episodes, memory journal and
        checkpoints hold the old case, which a resumed run would mix with the new one."""
        digests = {c.id: case_digest(c) for c in cases}
        stored = stored_config(self.folder.config)
        began = (stored.case_digests if stored is not None else None) or {}
        changed = [i for i, d in digests.items() if i in began and began[i] != d]
        if changed:
            more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            raise ConfigError(
                f"{self.folder.path} holds a run of other cases: case {', '.join(changed[:5])}{more} changed since "
                "the run began (its history, persona, query or gold), and its episodes, memory and checkpoints hold "
                "the old case; resume with the cases the run began with, or choose a new --out folder"
            )
        return {**began, **digests}

    def _config(self, cases: list[Case], digests: dict[str, str] | None = None) -> dict[str, Any]:
        """config.json: the run as resolved (`digests`: the cases' as `_check_cases_unchanged` gave
        them; default, those of `cases`). Whether it is a dry run is known only from its calls
        (summary.json's `dry_run`)."""
        previous = stored_config(self.folder.config)
        return {
            "run_id": self.run_id,
            "started_at": (previous and previous.started_at) or datetime.now(UTC).isoformat(timespec="seconds"),
            "recipe": self.recipe.model_dump(mode="json"),
            "plugins": plugins_used(self.recipe),  # what the recipe loaded from researchers' own packages
            "cache_dir": self.cache_dir,
            "cases": [c.id for c in cases],
            "case_digests": digests if digests is not None else {c.id: case_digest(c) for c in cases},
            "versions": _versions(),
        }

    def finish(self, config: dict[str, Any], cases: list[Case] | None = None) -> RunOutcome:
        self.outcome = finish_run(self.folder, config, cases, budget=self.budget)
        return self.outcome


def check_system_settings(cases: list[Case], recipe: Recipe) -> None:
    """The benchmark contract's settings clause for the settings systems choose for themselves
    (`systems[i].setting`; the recipe's own is checked as the cases load): a DataError, nothing starts."""
    own = [s.setting for s in recipe.systems if s.setting and s.setting != recipe.benchmark.setting]
    if own:
        check_cases(cases, own, f"benchmark {recipe.benchmark.name!r}, the systems' own settings", histories=False)


def _mend_torn_line(path: Path, consequence: str) -> None:
    """Cut a line the previous process died writing, so appending goes on from a clean end."""
    torn = read_appended_jsonl(path, repair=True).torn_line
    if torn is not None:
        print(
            f"note: {path}:{torn}: dropped a torn last line (the run stopped while writing it); {consequence}",
            file=sys.stderr,
        )


class EpisodeProgress:
    """A rich progress bar over episodes: done of all, failures, elapsed time and the time left at the
    pace so far; below it what the run's calls have spent so far (tokens, dollars, and what is left
    of a budget) and, while something slow starts (a local model loading, a memory opening its
    embedder, a sandbox web indexing), what the run is waiting for. Nothing when disabled."""

    def __init__(
        self,
        enabled: bool,
        total: int,
        done: int,
        *,
        ledger: Any = None,
        budget: Budget | None = None,
        waits: Waits | None = None,
    ) -> None:
        self.enabled, self.total, self.done = enabled, total, done
        self.failed = 0
        self.finished = 0  # episodes this session finished (a resumed run's earlier ones set no pace)
        self.started = time.monotonic()
        self.ledger, self.budget, self.waits = ledger, budget, waits

    def eta(self, now: float | None = None) -> str:
        """The time left at this session's pace so far (its elapsed time over the episodes it
        finished, times those still to run): `about 0:03:20 left`, or why it is not known yet."""
        left = self.total - self.done - self.finished
        if left <= 0:
            return "done"
        if not self.finished:
            return "time left: ? (no episode done yet)"
        seconds = ((now if now is not None else time.monotonic()) - self.started) / self.finished * left
        return f"about {int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d} left"

    def spend_line(self) -> str:
        """`1,234 tokens, $0.0123 spent so far (budget $5: $4.98 left)`, from the run's ledger."""
        from atelier.runs.reading.usage import format_cost

        if self.ledger is None:
            return ""
        so_far = self.ledger.running_totals()
        line = f"{so_far['tokens']:,} tokens, {format_cost(so_far)} spent so far"
        if so_far["calls"]:
            line += f" ({so_far['calls']} call{'s' * (so_far['calls'] != 1)}, {so_far['cache_hits']} from the response cache)"
        if self.budget is not None:
            left = max(0.0, self.budget.limit_usd - self.budget.spent)
            line += f"; budget ${self.budget.limit_usd:g}: ${left:.4g} left"
        return line

    def notes(self) -> list[str]:
        lines = [line for line in (self.spend_line(),) if line]
        waiting = self.waits.now() if self.waits is not None else None
        if waiting:
            lines.append(f"waiting for {waiting}")
        return lines

    def __enter__(self) -> EpisodeProgress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.text import Text

            notes, eta = self.notes, self.eta

            class Remaining(ProgressColumn):
                def render(self, task) -> Text:
                    return Text(eta(), style="progress.remaining")

            class RunProgress(Progress):
                def get_renderables(self):
                    yield from super().get_renderables()
                    for line in notes():
                        yield Text(line, style="dim")

            self._bar = RunProgress(
                TextColumn("episodes"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                TimeElapsedColumn(),
                Remaining(),
                transient=False,
                refresh_per_second=4,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=self.total, completed=self.done, failed=0)
        return self

    def advance(self, ok: bool) -> None:
        self.failed += not ok
        self.finished += 1
        if self.enabled:
            self._bar.update(self._task, advance=1, failed=self.failed)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._bar.stop()


def run_recipe(recipe: Recipe, folder: Path | None = None, *, progress: bool = True) -> RunFolder:
    return asyncio.run(Runner(recipe, folder, progress=progress).run())


def dry_run_ledger(recipe: Recipe, folder: Path) -> list[LedgerEntry]:
    """Run `recipe` in `folder` with no preflight and no progress bar; its ledger (the cost
    forecast's measurement: `atelier.runs.execution.cost.forecast(recipe, run=dry_run_ledger)`)."""
    runner = Runner(recipe, folder, progress=False, preflight=False)
    asyncio.run(runner.run())
    return read_ledger(runner.folder.ledger)
