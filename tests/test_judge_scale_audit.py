"""Audit D6–D9: a judge's score is a finite number on a declared scale with finite bounds, and
scores recorded on different scales are never subtracted.

- D7: numpy's `bool_(True)` is no score (it was read as 1.0): refused as a plain `bool` is, for a
  score, a criterion and a repeat's score, in a run and where a results file is read back;
- D8: a scale `0-` followed by 400 nines parsed to (0, inf) and held any score (1e300): refused
  before any episode, naming the scale, as 5-1 is;
- D9: repeat scores inf and -inf made the combining code raise (`-inf + inf in fsum`, recorded as
  `judge_raised`): they are named by the scale clause, `judge_off_scale`;
- D6: `atelier compare` subtracted a judge's scores recorded on 1-5 in one run and 0-100 in the
  other (+32.000, exit 0): it refuses, naming the judge and both scales.

The judges here are plugins named by `module:attr`, as a researcher's would be."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy
import pytest
from pydantic import ValidationError

from atelier.agents.judges import contract as judge_contract
from atelier.agents.judges.base import (
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeResult,
    check_judge_fit,
    combine_repeats,
    parse_scale,
)
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe
from atelier.runs.folder.results import READ_BACK, ResultRecord, ResultsFile
from atelier.runs.reading.outcome import EXIT_FAILURES
from tests.test_cli_errors import TINY, atelier, the_error

HERE = "tests.test_judge_scale_audit"
HUGE = "0-" + "9" * 400  # float() reads the upper bound as inf


class NumpyBoolScore(Judge):
    """Scores with numpy's bool_(True): no `bool`, yet pydantic read it as 1.0."""

    name = "numpy_bool_score"
    config_model = JudgeConfig
    scale = "1-5"

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        return self.result(numpy.bool_(True))  # type: ignore[arg-type]


class HugeScale(Judge):
    """Declares a scale whose upper bound is infinite as a float; scores 1e300."""

    name = "huge_scale"
    config_model = JudgeConfig
    scale = HUGE

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        return self.result(1e300)


class InfThenMinusInf(Judge):
    """Scores inf on its first repeat and -inf on its second (each repeat moves the seed by one)."""

    name = "inf_then_minus_inf"
    config_model = JudgeConfig
    scale = "1-5"

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        seed = env.gateway.settings(self.role).seed or 0
        return self.result(math.inf if seed % 2 == 0 else -math.inf)


def recipe_file(tmp_path: Path, judges: list[dict[str, Any]]) -> Path:
    def table(judge: dict[str, Any]) -> str:
        return "[[judges]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in judge.items())

    path = tmp_path / "recipe.toml"
    path.write_text(
        'name = "scale-audit"\nseed = 0\n[benchmark]\nname = "tiny"\nsetting = "context"\nlimit = 2\n'
        '[models.system]\nmodel = "scripted"\n[models.judge]\nmodel = "scripted"\n'
        '[[systems]]\nname = "sys"\npipeline = "direct"\nmemory = { backend = "full" }\n'
        + "".join(table(j) for j in [*judges, {"name": "lampqa_aspects"}])
    )
    return path


def run(tmp_path: Path, capsys, monkeypatch, judges: list[dict[str, Any]]) -> tuple[int, str, Path]:
    folder = tmp_path / "run"
    recipe = recipe_file(tmp_path, judges)
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(folder), "--no-progress")
    return code, err, folder


def judgments_of(folder: Path, judge: str) -> list[JudgeResult]:
    records = list(ResultsFile(folder / "results.jsonl").load().values())
    assert records and all(r.ok for r in records)
    for record in records:  # the sound judge keeps its score
        assert record.scores["lampqa_aspects"] is not None
    return [next(j for j in r.judgments if j.judge == judge) for r in records]


# --------------------------------------------------------------------------- D7: numpy's bool


@pytest.mark.parametrize("true", [numpy.bool_(True), numpy.array(True), True])
def test_any_boolean_is_refused_as_a_score_a_std_and_a_criterion(true):
    for fields in ({"score": true}, {"score": 3.0, "std": true}, {"score": 3.0, "criteria": {"tone": true}}):
        with pytest.raises(ValidationError, match="true is a bool, not a score"):
            JudgeResult(judge="j", scale="1-5", **fields)


def test_a_numpy_bool_among_the_repeat_scores_is_named_by_the_scale_clause():
    result = JudgeResult(judge="j", score=3.0, scale="1-5", details={"repeat_scores": [3.0, numpy.bool_(True)]})
    assert judge_contract.score_problems(result, "1-5") == ["repeat 2 score true is a bool, not a score"]
    held = judge_contract.held_to_scale(result, "1-5", "judge:j")
    assert held.failed and held.score is None and [d.kind for d in held.degraded] == ["judge_off_scale"]


def test_a_numpy_bool_in_a_judgment_read_back_is_refused():
    """Read back (`READ_BACK`, as `ResultsFile.load` reads), a judgment holding numpy's bool (a
    record built by a plugin's code, not by JSON) is refused as `true` is."""
    record = {
        "key": "c1::sys",
        "run_id": "r",
        "case_id": "c1",
        "system": "sys",
        "benchmark": "tiny",
        "user_id": "u",
        "setting": "context",
        "status": "ok",
        "judgments": [{"judge": "j", "score": 3.0, "scale": "1-5", "criteria": {"c": numpy.bool_(False)}}],
    }
    with pytest.raises(ValidationError, match="criterion 'c': false is a bool, not a score"):
        ResultRecord.model_validate(record, context=READ_BACK)


def test_a_judge_scoring_with_numpy_bool_fails_its_judgment_in_a_run(tmp_path, capsys, monkeypatch, cache_dir):
    """Was: rc 0, score 1.0 on 1-5 recorded (audit D7). Now as a plain `bool` is: the judgment fails
    naming the bool (the JudgeResult the judge built is refused: `judge_raised`), the run exits 3."""
    judge = f"{HERE}:NumpyBoolScore"
    code, err, folder = run(tmp_path, capsys, monkeypatch, [{"name": judge}])
    assert code == EXIT_FAILURES, err
    for judgment in judgments_of(folder, judge):
        assert judgment.failed and judgment.score is None
        assert "true is a bool, not a score" in (judgment.error or "")
        assert [d.kind for d in judgment.degraded] == ["judge_raised"]


# --------------------------------------------------------------------------- D8: a scale with an infinite bound


def test_a_scale_whose_bound_is_not_finite_is_no_scale():
    assert parse_scale(HUGE) is None
    assert parse_scale("0-" + "9" * 300) == (0.0, float("9" * 300))  # large, finite: a scale
    judge = HugeScale(JudgeConfig(name="huge"))
    problem = judge.scale_problem()
    assert problem is not None and "judge 'huge' declares scale '0-999" in problem
    assert "bounds are not both finite" in problem and len(problem) < 200  # the 402 characters, cut
    with pytest.raises(ConfigError, match="bounds are not both finite"):
        check_judge_fit([judge], [], "tiny")


def test_a_recorded_scale_whose_bound_is_not_finite_holds_no_score():
    """A results file's judgment (edited) on such a scale is read as failed, never summed."""
    held = judge_contract.as_recorded(JudgeResult(judge="j", score=1e300, scale=HUGE))
    assert held.failed and held.score is None and "is not 'low-high' with finite bounds" in (held.error or "")
    assert [d.kind for d in held.degraded] == ["judge_off_scale"]


def test_a_run_with_a_judge_on_an_infinite_scale_is_refused_before_any_episode(
    tmp_path, capsys, monkeypatch, cache_dir
):
    """Was: rc 0, a mean of 1e300 printed as a 300-digit number (audit D8)."""
    code, err, folder = run(tmp_path, capsys, monkeypatch, [{"name": f"{HERE}:HugeScale"}])
    assert code == 2, err
    assert f"judge '{HERE}:HugeScale' declares scale '0-999" in err and "bounds are not both finite" in err
    assert not (folder / "results.jsonl").exists()


# --------------------------------------------------------------------------- D9: repeats inf and -inf


def test_repeat_scores_that_are_not_finite_are_not_combined_and_are_named_off_scale():
    for scores in ([math.inf, -math.inf], [math.nan, 3.0], [math.inf, math.inf]):
        results = [
            JudgeResult(judge="j", score=s, scale="1-5", criteria={"c": s}, details={"i": i})
            for i, s in enumerate(scores)
        ]
        combined = combine_repeats("j", "1-5", results, [])  # raised ValueError / AttributeError
        assert combined.score is None and combined.std is None
        assert combined.details["repeat_scores"] == scores or math.isnan(combined.details["repeat_scores"][0])
        held = judge_contract.held_to_scale(combined, "1-5", "judge:j")
        assert held.failed and [d.kind for d in held.degraded] == ["judge_off_scale"]
        assert judge_contract.SCALE.name in (held.error or "")
        for i, s in enumerate(scores, 1):
            if not math.isfinite(s):
                assert f"repeat {i} score {s} is not a finite number" in (held.error or "")


def test_a_judge_whose_repeats_score_inf_and_minus_inf_breaks_the_scale_clause(
    tmp_path, capsys, monkeypatch, cache_dir
):
    """Was: `judge_raised ... raised ValueError: -inf + inf in fsum` (audit D9): the framework's own
    combining raised, not the judge."""
    judge = f"{HERE}:InfThenMinusInf"
    code, err, folder = run(tmp_path, capsys, monkeypatch, [{"name": judge, "repeats": 2}])
    assert code == EXIT_FAILURES, err
    assert "fsum" not in err and "judge_raised" not in err
    for judgment in judgments_of(folder, judge):
        assert judgment.failed and judgment.score is None
        error = judgment.error or ""
        assert judge_contract.SCALE.name in error and "(scale 1-5)" in error
        assert "repeat 1 score inf is not a finite number" in error
        assert "repeat 2 score -inf is not a finite number" in error
        assert [d.kind for d in judgment.degraded] == ["judge_off_scale"]


# --------------------------------------------------------------------------- D6: compare across scales

JUDGE = "lampqa_aspects"  # TINY's judge, on the scale 0-1


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A finished run of the tiny benchmark (three cases, one system, one judge), to copy and edit."""
    root = tmp_path_factory.mktemp("scale-audit")
    recipe = root / "tiny.toml"
    recipe.write_text(TINY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATELIER_CACHE_DIR", str(root / "cache"))
        return run_recipe(load_recipe(recipe), root / "run", progress=False).path


def rescaled(folder: Path, scale: str, factor: float) -> Path:
    """The folder's judgments of JUDGE recorded on `scale`, their scores multiplied by `factor` (as a
    run of the same judge declaring another scale records them)."""
    results = folder / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    for row in rows:
        for judgment in row["judgments"]:
            if judgment["judge"] == JUDGE and judgment["score"] is not None:
                judgment["scale"] = scale
                judgment["score"] = judgment["score"] * factor + 1
                row["scores"][JUDGE] = judgment["score"]
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_compare_refuses_a_judge_recorded_on_different_scales(template, tmp_path, capsys, monkeypatch, cache_dir):
    """Was: rc 0 and the 0-100 run's scores minus the 1-5 run's (audit D6)."""
    small = rescaled(Path(shutil.copytree(template, tmp_path / "small")), "1-5", 4)
    large = rescaled(Path(shutil.copytree(template, tmp_path / "large")), "0-100", 90)
    for folder in (small, large):
        code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
        assert code == 0, err
    code, out, err = atelier(capsys, monkeypatch, "compare", str(small), str(large))
    assert code == 2, out + err
    said = the_error(err)
    assert "a judge's scale differs" in said
    assert f"judge {JUDGE!r} scored on different scales (1-5 in small; 0-100 in large)" in err
    assert "paired on shared cases" not in out


def test_compare_still_pairs_a_judge_recorded_on_one_scale(template, tmp_path, capsys, monkeypatch, cache_dir):
    first = Path(shutil.copytree(template, tmp_path / "first"))
    second = Path(shutil.copytree(template, tmp_path / "second"))
    code, out, err = atelier(capsys, monkeypatch, "compare", str(first), str(second))
    assert code == 0, err
    assert "scale differs" not in out + err
