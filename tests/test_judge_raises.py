"""A judge that raises (a bug in it: a RuntimeError, a JudgeResult its own validation refuses, a
TypeError) fails its own judgment, named by the judge contract's clause 'failures returned as failed
judgments' and recorded as `judge_raised` — on every path a run calls judges through
(`held_to_contract`: the judge graph, a rescore, the comparisons), and in `atelier check judge`. The
episode keeps its response and the other judges' judgments, and the run exits 3. What fails the
episode by design (a dead local model server, a replay miss) and cancellation still go through.

The judges here are plugins named by `module:attr`, as a researcher's would be."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from atelier.agents.judges import contract as judge_contract
from atelier.agents.judges.base import (
    ComparativeJudge,
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeFailed,
    JudgeResult,
    create_judge,
)
from atelier.agents.models.gateway import ModelCallError
from atelier.agents.models.local_model import LocalServerDied
from atelier.agents.models.spend import BUDGET_REACHED
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.runs.execution.runner import Runner
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile
from atelier.runs.reading.outcome import EXIT_FAILURES
from atelier.runs.studies.conformance.run import run_check
from atelier.tools.errors import ReplayMiss
from tests.test_cli_errors import atelier

HERE = "tests.test_judge_raises"
RAISING = f"{HERE}:Raising"
INVALID = f"{HERE}:InvalidResult"
CLAUSE = judge_contract.RETURNED


class Raising(Judge):
    """A judge with a bug: it raises a RuntimeError."""

    name = "raising"
    config_model = JudgeConfig
    scale = "1-5"

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        raise RuntimeError("judge bug")


class InvalidResult(Judge):
    """Builds a JudgeResult with a word for its score: pydantic's ValidationError."""

    name = "invalid_result"
    config_model = JudgeConfig
    scale = "1-5"

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        return JudgeResult(judge=self.key, score="three", scale=self.scale)


class RaisingPairwiseConfig(JudgeConfig):
    baseline: str = Field(min_length=1)


class RaisingPairwise(ComparativeJudge):
    """A comparative judge with a bug: it raises a TypeError."""

    name = "raising_pairwise"
    config_model = RaisingPairwiseConfig
    scale = "0-1"
    config: RaisingPairwiseConfig

    @property
    def baseline(self) -> str:
        return self.config.baseline

    async def judge_pair_once(
        self, case: Case, response: SystemResponse, other: SystemResponse, env: JudgeEnv
    ) -> JudgeResult:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")


def recipe_file(tmp_path: Path, judges: list[str], systems: tuple[str, ...] = ("sys",)) -> Path:
    tables = "".join(
        f'[[systems]]\nname = "{s}"\npipeline = "direct"\nmemory = {{ backend = "full" }}\n' for s in systems
    )
    path = tmp_path / "recipe.toml"
    path.write_text(
        'name = "raises"\n[benchmark]\nname = "tiny"\nsetting = "context"\nlimit = 2\n'
        '[models.system]\nmodel = "scripted"\n[models.judge]\nmodel = "scripted"\n'
        + tables
        + "".join(f'[[judges]]\nname = "{j}"\n' for j in judges)
    )
    return path


def records_of(folder: Path) -> list[ResultRecord]:
    return list(ResultsFile(folder / "results.jsonl").load().values())


def assert_failed_alone(records: list[ResultRecord], judge: str, raised: str) -> None:
    """Every episode kept its response and the sound judge's score; `judge`'s judgment failed,
    naming the clause, the judge and what it raised, recorded as `judge_raised` at its step."""
    assert records
    for record in records:
        assert record.ok and record.response is not None and record.response.text, record.error
        sound = next(j for j in record.judgments if j.judge == "lampqa_aspects")
        assert not sound.failed and sound.score is not None
        failed = next(j for j in record.judgments if j.judge == judge)
        assert failed.failed and failed.score is None
        assert CLAUSE.name in (failed.error or "") and f"judge {judge!r} raised {raised}" in (failed.error or "")
        assert [(d.kind, d.step) for d in failed.degraded] == [("judge_raised", f"judge:{judge}")]
        assert record.scores[judge] is None and record.scores["lampqa_aspects"] == sound.score
        assert "judge_raised" in [d.kind for d in record.degraded]


# --------------------------------------------------------------------------- a run (the judge graph)


def test_a_judge_that_raises_fails_its_judgment_alone_and_the_run_exits_3(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = recipe_file(tmp_path, [RAISING, INVALID, "lampqa_aspects"])
    folder = tmp_path / "run"
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(folder), "--no-progress")

    assert code == EXIT_FAILURES, err
    records = records_of(folder)
    assert len(records) == 2
    assert_failed_alone(records, RAISING, "RuntimeError: judge bug")
    assert_failed_alone(records, INVALID, "ValidationError: 1 validation error for JudgeResult score")
    assert "judge_raised" in err and "Traceback" not in err
    summary = json.loads((folder / "summary.json").read_text())
    degraded = {d["kind"]: d["count"] for d in summary["episodes"]["degraded"]}
    assert degraded == {"judge_raised": 4} and summary["episodes"]["failed"] == 0


# --------------------------------------------------------------------------- a rescore


def test_a_rescore_with_a_judge_that_raises_keeps_the_responses_and_exits_3(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = recipe_file(tmp_path, ["lampqa_aspects"])
    original = tmp_path / "run"
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(original), "--no-progress")
    assert code == 0, err
    rescored = tmp_path / "rescored"
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "rescore",
        str(original),
        "--judge",
        RAISING,
        "--judge",
        "lampqa_aspects",
        "--out",
        str(rescored),
        "--no-progress",
    )
    assert code == EXIT_FAILURES, err
    records = records_of(rescored)
    assert len(records) == 2
    assert_failed_alone(records, RAISING, "RuntimeError: judge bug")
    kept = {r.key: r.response for r in records_of(original)}
    assert {r.key: r.response for r in records} == kept  # the stored responses, judged again


# --------------------------------------------------------------------------- the comparisons


def test_a_comparative_judge_that_raises_fails_its_comparisons_alone(tmp_path):
    recipe = parse_recipe(
        {
            "name": "raises-pairwise",
            "benchmark": {"name": "tiny", "setting": "context", "limit": 2},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {"name": "sys", "pipeline": "direct", "memory": {"backend": "full"}},
                {"name": "base", "pipeline": "direct", "memory": {"backend": "none"}},
            ],
            "judges": [{"name": "lampqa_aspects"}, {"name": f"{HERE}:RaisingPairwise", "baseline": "base"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    runner = Runner(recipe, tmp_path / "run", progress=False)
    asyncio.run(runner.run())
    key = f"{HERE}:RaisingPairwise"
    compared = [r for r in records_of(runner.folder.path) if r.system == "sys"]
    assert len(compared) == 2
    assert_failed_alone(compared, key, "TypeError: unsupported operand type(s) for +")
    assert runner.outcome is not None and runner.outcome.exit_code == EXIT_FAILURES
    assert runner.outcome.failing_degradations == {"judge_raised": 2}


# --------------------------------------------------------------------------- what goes through


def test_the_protocols_failures_are_failed_judgments_and_what_fails_an_episode_goes_through():
    """JudgeFailed and ModelCallError (a budget's refusal included: the runner reads "budget reached"
    in the failed judgment) are the failures `Judge.judge` itself returns: failed judgments with
    their reason, no broken clause. A dead local server and a replay miss fail the episode wherever
    they are raised, and a cancelled judgment stays cancelled."""
    judge = create_judge({"name": "lampqa_aspects"})

    async def raising(exc: BaseException) -> JudgeResult:
        raise exc

    async def held(exc: BaseException) -> JudgeResult:
        return await judge_contract.held_to_contract(judge, raising(exc))

    bug = asyncio.run(held(ValueError("bad value")))
    assert bug.failed and "judge 'lampqa_aspects' raised ValueError: bad value" in (bug.error or "")
    assert [d.kind for d in bug.degraded] == ["judge_raised"]

    budget = ModelCallError(f"{BUDGET_REACHED}: the judge call's bound", role="judge", model="m", attempts=0)
    for exc, said in [(JudgeFailed("no aspects to score"), "no aspects to score"), (budget, BUDGET_REACHED)]:
        failed = asyncio.run(held(exc))
        assert failed.failed and said in (failed.error or "") and failed.degraded == []

    for through in (LocalServerDied("the local model server died"), ReplayMiss("replay: no recorded page")):
        with pytest.raises(type(through)):
            asyncio.run(held(through))
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(held(asyncio.CancelledError()))


# --------------------------------------------------------------------------- atelier check judge


def test_the_kit_breaks_the_same_clause_for_a_judge_that_raises(tmp_path):
    report = asyncio.run(run_check("judge", RAISING, {}, tmp_path / "kit"))
    assert [c.name for c in report.broken] == [CLAUSE.name], report.lines()
    [clause] = report.broken
    assert f"judge {RAISING!r} raised RuntimeError: judge bug" in clause.evidence
    assert report.exit_code == EXIT_FAILURES
