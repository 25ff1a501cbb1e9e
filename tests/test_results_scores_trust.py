"""A results line's `scores` map is a copy of its judgments' scores (`{j.judge: j.score}`, as every
record is written). Readers (report, compare, view, rescore, resume: all through `ResultsFile.load`)
take each judge's score from its judgment held to its scale, and refuse a map that disagrees with it
— a NaN, 35 for a judgment of 3.0, a judge with no judgment — as a data error naming the file, the
line and the field (audit B4: the map was trusted, crashing the report or shifting its means)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atelier.agents.judges.base import JudgeResult
from atelier.agents.judges.contract import as_recorded, held_to_scale, score_problems
from atelier.benchmarks.common.errors import DataError
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe
from atelier.runs.folder.results import ResultsFile
from tests.test_cli_errors import TINY, atelier, one_error_line, the_error

JUDGE = "lampqa_aspects"  # TINY's judge, on the scale 0-1


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A finished run of the tiny benchmark (three cases, one system, one judge), to copy and edit."""
    root = tmp_path_factory.mktemp("scores-trust")
    recipe = root / "tiny.toml"
    recipe.write_text(TINY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATELIER_CACHE_DIR", str(root / "cache"))
        return run_recipe(load_recipe(recipe), root / "run", progress=False).path


@pytest.fixture
def folder(template, tmp_path, cache_dir) -> Path:
    return Path(shutil.copytree(template, tmp_path / "run"))


def lines_of(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def edit(folder: Path, number: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """Line `number` (1-based) of the folder's results changed in place, as a hand edit would."""
    results = folder / "results.jsonl"
    rows = lines_of(folder)
    change(rows[number - 1])
    results.write_text("".join(json.dumps(row, allow_nan=True) + "\n" for row in rows))
    return results


def judgment(row: dict[str, Any]) -> dict[str, Any]:
    [found] = [j for j in row["judgments"] if j["judge"] == JUDGE]
    return found


def mean_of(folder: Path) -> tuple[int, float]:
    stats = json.loads((folder / "summary.json").read_text())["systems"]["none"]["judges"][JUDGE]
    return stats["n"], stats["mean"]


# ------------------------------------------------------------------------------ (a) a NaN in the map


def test_a_nan_in_the_scores_map_is_one_error_naming_file_line_and_field(folder, capsys, monkeypatch):
    """Was exit 1: 'unexpected ValueError: values contains NaN or infinite values (a bug ...)'."""
    said = judgment(lines_of(folder)[1])["score"]
    results = edit(folder, 2, lambda row: row["scores"].update({JUDGE: float("nan")}))
    assert "NaN" in results.read_text().splitlines()[1]
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 2, err
    assert one_error_line(err) == f"error: {results}:2 field 'scores.{JUDGE}': nan but its judgment says {said!r}"


# ------------------------------------------------------------------- (b) repeat_scores not a list


def test_score_problems_names_repeat_scores_that_are_not_a_list():
    """Was a bare TypeError ('int' object is not iterable), in a live run (failing the episode) and
    in every reader of a results file holding it."""
    result = JudgeResult(judge="pqr", score=3.0, scale="1-5", details={"repeat_scores": 5})
    assert score_problems(result, "1-5") == ["repeat_scores 5 is not a list of scores"]
    assert score_problems(result.model_copy(update={"details": {"repeat_scores": "35"}}), "1-5") == [
        "repeat_scores '35' is not a list of scores"
    ]
    assert score_problems(result.model_copy(update={"details": {"repeat_scores": [3.0, 4.0]}}), "1-5") == []
    for held in (held_to_scale(result, "1-5", "judge:pqr"), as_recorded(result)):
        assert held.failed and held.score is None
        assert "repeat_scores 5 is not a list of scores" in (held.error or "")
        assert [d.kind for d in held.degraded] == ["judge_off_scale"]


def test_repeat_scores_not_a_list_fails_that_judgment_and_the_report_goes_on(folder, capsys, monkeypatch):
    """Was exit 1: 'unexpected TypeError: 'int' object is not iterable'."""
    rows = lines_of(folder)
    results = edit(folder, 1, lambda row: judgment(row)["details"].update({"repeat_scores": 5}))
    code, out, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 3, err  # answered but not fully judged
    assert "unexpected" not in err and "Traceback" not in err
    assert "repeat_scores 5 is not a list of scores" in out + err
    record = ResultsFile(results).load()[rows[0]["key"]]
    [held] = record.judgments
    assert held.failed and record.scores == {JUDGE: None}
    assert [d.kind for d in record.degraded] == ["judge_off_scale"]
    others = [judgment(r)["score"] for r in rows[1:]]
    n, mean = mean_of(folder)
    assert n == 2 and mean == pytest.approx(sum(others) / 2)  # the other two cases, nothing else lost


# --------------------------------------------------------------- (c) a map disagreeing with its judgment


@pytest.mark.parametrize(
    ("entry", "value", "problem"),
    [
        (JUDGE, 35, "35.0 but its judgment says {said!r}"),
        (JUDGE, None, "null but its judgment says {said!r}"),
        (JUDGE, float("inf"), "inf but its judgment says {said!r}"),
        ("ghost", 0.5, "0.5 but no judgment of 'ghost' is recorded"),
    ],
)
def test_a_scores_map_disagreeing_with_its_judgment_is_refused(folder, capsys, monkeypatch, entry, value, problem):
    """Was exit 0 with the edited value in the means (35 on a 0-1 judge), and compare's difference
    resting on it."""
    said = judgment(lines_of(folder)[2])["score"]
    results = edit(folder, 3, lambda row: row["scores"].update({entry: value}))
    expected = f"{results}:3 field 'scores.{entry}': {problem.format(said=said)}"
    with pytest.raises(DataError) as refused:
        ResultsFile(results).load()
    assert str(refused.value) == expected
    assert (refused.value.file, refused.value.line, refused.value.field) == (str(results), 3, f"scores.{entry}")
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 2, err
    assert one_error_line(err) == f"error: {expected}"
    code, _, err = atelier(capsys, monkeypatch, "compare", str(folder), str(folder))
    assert code == 2, err
    assert the_error(err) == f"error: {expected}"


# ------------------------------------------------------------------------------ (d) a consistent file


def test_a_consistent_file_reports_the_mean_of_its_judgments(folder, capsys, monkeypatch):
    """The scores a reader sums are the judgments': a map equal to them but for float rounding is
    read as the judgments say (0.25, 0.5, 0.75: mean 0.5 exactly, where the map's would not be)."""
    rows = lines_of(folder)
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)  # as written: the map is a copy
    assert all(r["scores"] == {JUDGE: judgment(r)["score"]} for r in rows)
    for number, score, written in [(1, 0.25, 0.25), (2, 0.5, 0.5 + 1e-15), (3, 0.75, 0.75 + 1e-15)]:

        def change(row: dict[str, Any], score: float = score, written: float = written) -> None:
            judgment(row)["score"] = score
            row["scores"][JUDGE] = written

        edit(folder, number, change)
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 0, err
    assert mean_of(folder) == (3, 0.5)


def test_a_line_without_its_scores_map_is_read_from_its_judgments(folder, capsys, monkeypatch):
    """Nothing computed is lost: the map is a copy, so a line without it still counts its judgment."""
    scores = [judgment(r)["score"] for r in lines_of(folder)]
    edit(folder, 1, lambda row: row.pop("scores"))
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 0, err
    n, mean = mean_of(folder)
    assert n == 3 and mean == pytest.approx(math.fsum(scores) / 3)


def test_a_torn_last_line_is_said_where_the_report_counts_its_episode_as_not_run(folder, capsys, monkeypatch):
    """A run killed while writing a line leaves it torn: the report counts its episode as not run
    (exit 130) and says why, naming the line (it said only '1 not run')."""
    results = folder / "results.jsonl"
    results.write_bytes(results.read_bytes()[:-40])  # the last line, cut short with no newline
    code, out, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 130, err
    said = out + err
    assert "2 scored, 0 failed, 1 not run (of 3)" in said
    assert f"{results}:3: a torn last line was not read (the run stopped while writing it)" in said


def test_a_judgment_whose_score_is_a_bool_is_refused_naming_its_field(folder, capsys, monkeypatch):
    """pydantic reads `true` as 1.0: a judgment scored `true` (an edited line, a judge's bug) read as a
    perfect score, exit 0 (audit). It is refused naming the line and the field."""

    def scored_true(row: dict[str, Any]) -> None:
        judgment(row)["score"] = True
        row["scores"][JUDGE] = True

    results = edit(folder, 1, scored_true)
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == 2, err
    said = one_error_line(err)
    assert said.startswith(f"error: {results}:1 field 'judgments.0.score'") and "true is a bool, not a score" in said
