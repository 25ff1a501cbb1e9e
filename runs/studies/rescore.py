"""`atelier rescore RUN_DIR --judge ...`: judge a finished run's responses again — other judges, other
judge models — without running its systems.

The result is a new run folder beside the original (config.json names the original under
`rescore_of`) with the same layout: results.jsonl (the stored responses with the new judgments),
summary.json, ledger.jsonl (judge roles only: no system runs) and report.html. Cited sources are read
from the original run's recorded web in replay mode, so the judges see exactly the pages the
systems saw; criteria and rubrics the original run generated are reused (its judge_artifacts).
A rescore folder resumes like a run folder.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from atelier.agents.judges.base import check_judge_fit, create_judge
from atelier.agents.models.ledger import Ledger, call_tags, capture_calls
from atelier.agents.models.settings import JUDGE_ROLES, ModelSettings
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import copy_files
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_json_file, validation_error
from atelier.benchmarks.common.redaction import redacting
from atelier.graphs.judge import ARTIFACTS_DIR
from atelier.graphs.resources import release
from atelier.graphs.sources import SOURCES_DIR
from atelier.runs.execution.judging import judge_again, judge_comparisons
from atelier.runs.execution.preflight import preflight
from atelier.runs.execution.runner import EpisodeProgress, Runner
from atelier.runs.folder.epochs import judge_context
from atelier.runs.folder.layout import RunFolder
from atelier.runs.folder.lock import RunFolderLock
from atelier.runs.folder.recipe import Recipe, parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile, write_json_atomic

MASKED = "**********"  # how config.json shows a secret


def load_run(run_dir: Path) -> tuple[dict[str, Any], Recipe, dict[str, ResultRecord]]:
    folder = RunFolder(run_dir)
    if not folder.config.is_file():
        raise ConfigError(f"{run_dir} is not a run folder: it has no config.json")
    if not folder.results.is_file():
        raise ConfigError(f"{run_dir} has no results.jsonl: nothing to rescore")
    config = read_json_file(folder.config, follow_links=False)
    data = config.get("recipe") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        raise DataError("holds no recipe (field 'recipe'): the run folder's config.json is damaged", file=folder.config)
    for settings in [
        *data.get("models", {}).values(),
        *(m for s in data.get("systems", []) for m in s.get("models", {}).values()),
    ]:
        if settings.get("api_key") == MASKED:  # never reuse a masked secret as a key
            settings["api_key"] = None
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file=folder.config, prefix="recipe.") from None
    return config, recipe, ResultsFile(folder.results).load()


def rescore_recipe(
    original: Recipe,
    run_dir: Path,
    judges: list[dict[str, Any]],
    models: dict[str, ModelSettings],
    web_mode: Literal["replay", "live", "record"],
) -> Recipe:
    """The original recipe with new judges (and judge models), the original's web replayed, and its
    run folders placed beside the original."""
    data = original.model_dump(mode="python", exclude={"source"})
    data["name"] = f"{original.name}-rescore"
    data["judges"] = judges
    kept, dropped = paper_rows_for(data["report"]["paper"], judges)
    data["report"] = {**data["report"], "paper": kept}
    if dropped:
        print(
            f"note: {len(dropped)} paper row{'s' * (len(dropped) != 1)} of the original left out of the rescore: "
            f"{'their judge is' if len(dropped) != 1 else 'its judge is'} not rescored "
            f"({', '.join(sorted({str(row['judge']) for row in dropped}))})",
            file=sys.stderr,
        )
    data["models"] = {
        **{role: s.model_dump() for role, s in original.models.items()},
        **{role: s.model_dump() for role, s in models.items()},
    }
    web = original.web
    data["web"] = web.model_copy(update={"mode": web_mode, "cache_dir": web.cache_dir or run_dir / "web"}).model_dump()
    data["run"] = {**data["run"], "out_dir": str(run_dir.parent)}
    return parse_recipe(data, source=f"rescore of {run_dir}")


def paper_rows_for(
    rows: list[dict[str, Any]], judges: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The original's paper rows a rescore with `judges` can still fill (rows of no judge — history
    metrics — and rows of a judge it runs), and the rows it cannot."""
    keys = {j.get("label") or j.get("name") for j in judges}
    kept = [row for row in rows if row.get("judge") is None or row["judge"] in keys]
    return kept, [row for row in rows if row not in kept]


class Rescore:
    def __init__(
        self,
        run_dir: Path,
        judges: list[dict[str, Any]],
        *,
        models: dict[str, ModelSettings] | None = None,
        out: Path | None = None,
        web_mode: Literal["replay", "live", "record"] = "replay",
        progress: bool = True,
        preflight: bool = True,
    ) -> None:
        if not judges:
            raise ConfigError("name at least one judge to rescore with (--judge NAME)")
        self.original_dir = run_dir
        self.original_config, self.original, self.records = load_run(run_dir)
        self.recipe = rescore_recipe(self.original, run_dir, judges, models or {}, web_mode)
        self.runner = Runner(self.recipe, out, progress=progress)
        self.preflight = preflight

    @property
    def folder(self) -> RunFolder:
        return self.runner.folder

    async def run(self) -> RunFolder:
        with RunFolderLock(self.folder.path, "rescore"), redacting(self.runner.redactor):  # its recipe's keys too
            return await self._run()

    async def _run(self) -> RunFolder:
        recipe, runner = self.recipe, self.runner
        b = recipe.benchmark
        runner._check_resumable()
        stored = [r for r in self.records.values() if r.ok and r.response is not None]
        wanted = {r.case_id for r in stored}
        cases = {c.id: c for c in recipe.cases(limited=False) if c.id in wanted}
        lost = sorted(wanted - set(cases))
        if lost:
            raise ConfigError(
                f"{len(lost)} cases of {self.original_dir} are no longer in benchmark {b.name!r} "
                f"(e.g. {lost[0]}): cannot rescore them"
            )
        probes = []
        if self.preflight:  # the run's preflight of what a rescore calls (its judges' models), and judge fit
            passed = await preflight(recipe, list(cases.values()), roles=("judge", *JUDGE_ROLES), command="rescore")
            print(f"preflight ok ({passed.seconds:.1f} s)", file=sys.stderr)
            probes = passed.calls
        else:
            check_judge_fit(
                [create_judge(j) for j in recipe.judges], list(cases.values()), b.name, [s.name for s in recipe.systems]
            )
        no_follow.make_folders(self.folder.path)
        if probes:  # the probes cost what calls cost
            Ledger(self.folder.ledger, runner.run_id).append(
                [e.model_copy(update={"run_id": runner.run_id}) for e in probes]
            )
        # the criteria and rubrics the original generated, and the texts its systems read (R reads a
        # source with no URL — gold information, a context item — by its sha256 from the run's store)
        for kept in (ARTIFACTS_DIR, SOURCES_DIR):
            if (self.original_dir / kept).is_dir():
                copy_files(self.original_dir / kept, self.folder.path / kept)
        # judging needs no memory: the systems' contexts carry the `none` backend
        contexts = {
            s.name: runner.context_for(s.model_copy(update={"memory": {"backend": "none"}})) for s in recipe.systems
        }
        # each epoch's responses judged with that epoch's judge seeds, as the run judged them
        judged = {
            (r.system, r.epoch): judge_context(contexts[r.system], r.epoch, recipe.run.reuse_judgments)
            for r in stored
            if r.system in contexts
        }
        config = runner._config([cases[i] for i in sorted(cases)])
        if "controls" in self.original_config:  # its control episodes are rescored too: who answered for whom
            config["controls"] = self.original_config["controls"]
        _, dropped = paper_rows_for(self.original.report.model_dump(mode="json")["paper"], recipe.judges)
        config["rescore_of"] = {
            "run_id": self.original_config.get("run_id"),
            "path": str(self.original_dir.resolve()),
            # failed episodes have no response to judge: they are left out
            "episodes": len(stored),
            "failed_episodes_left_out": len(self.records) - len(stored),
            "paper_rows_left_out": dropped,
        }
        write_json_atomic(self.folder.config, config)

        results = ResultsFile(self.folder.results)
        done = {k for k, r in results.load(repair=True).items() if r.ok}
        todo = [r for r in stored if r.key not in done and r.system in contexts]
        limit = asyncio.Semaphore(recipe.run.concurrency)

        async def one(record: ResultRecord) -> ResultRecord:
            async with limit:
                with (
                    call_tags(
                        case=record.case_id, system=record.system, epoch=str(record.epoch), control=record.control
                    ),
                    capture_calls() as calls,
                ):
                    judgments = await judge_again(cases[record.case_id], record, judged[(record.system, record.epoch)])
            # a dry run when its response was, or its judges' answers are, the scripted model's
            fresh = record.model_copy(
                update={
                    "run_id": runner.run_id,
                    "judgments": [],
                    "scores": {},
                    "dry_run": record.dry_run or any(c.dry_run for c in calls),
                }
            )
            rescored = fresh.with_judgments(judgments)
            results.append(rescored)
            return rescored

        with EpisodeProgress(self.runner.progress, total=len(stored), done=len(stored) - len(todo)) as bar:
            for finished in asyncio.as_completed([asyncio.create_task(one(r)) for r in todo]):
                bar.advance((await finished).ok)
        for record in await judge_comparisons(results.load(), cases, judged, recipe.run.concurrency):
            results.append(record)
        for context in [*contexts.values(), *judged.values()]:  # releasing one twice does nothing
            await release(context)
        runner.finish(config)
        return self.folder


def rescore_run(run_dir: Path, judges: list[dict[str, Any]], **options: Any) -> RunFolder:
    return asyncio.run(Rescore(run_dir, judges, **options).run())
