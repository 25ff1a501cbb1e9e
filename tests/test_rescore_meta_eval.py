"""`atelier rescore` on a finished quickstart run (no system call), `atelier meta-eval` against hand-worked
agreement figures and BESPOKE's feedback accuracy, and `atelier bench judge`."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from scipy import stats
from typer.testing import CliRunner

from atelier.agents.judges.base import JudgeResult
from atelier.agents.models.settings import ROLE_FALLBACK
from atelier.agents.response import SystemResponse
from atelier.benchmarks.metrics.statistics import percentile_bootstrap
from atelier.runs.cli import judges as judges_cli
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile

ROOT = Path(__file__).resolve().parent.parent


def atelier(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def latest(path: Path) -> dict[str, ResultRecord]:
    return ResultsFile(path).load()


@pytest.mark.battery
def test_rescore_a_quickstart_run_with_other_judges_calls_no_system(tmp_path) -> None:
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    original = tmp_path / "runs" / "quickstart"
    done = atelier(
        "run", "runs/recipes/quickstart.toml", "--limit", "2", "--no-progress", "--out", str(original), env=env
    )
    assert done.returncode == 0, done.stderr

    done = atelier(
        "rescore",
        str(original),
        "--judge",
        "bespoke",
        "--judge",
        '{"name": "lampqa_pairwise", "baseline": "direct-none"}',
        "--model",
        "scripted?seed=3",
        "--no-progress",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == original.parent and folder.name.startswith("quickstart-rescore-")

    config = json.loads((folder / "config.json").read_text())
    assert config["rescore_of"] == {
        "run_id": "quickstart",
        "path": str(original.resolve()),
        "episodes": 4,
        "failed_episodes_left_out": 0,
        "paper_rows_left_out": [],
    }
    assert [j["name"] for j in config["recipe"]["judges"]] == ["bespoke", "lampqa_pairwise"]
    assert config["recipe"]["models"]["judge"]["model"] == "scripted?seed=3"
    ledger = lines(folder / "ledger.jsonl")
    system_roles = {"system"} | {role for role, fallback in ROLE_FALLBACK.items() if fallback == "system"}
    assert ledger and not {e["role"] for e in ledger} & system_roles
    assert {e["model"] for e in ledger} == {"scripted?seed=3"}

    before, after = latest(original / "results.jsonl"), latest(folder / "results.jsonl")
    assert after.keys() == before.keys()
    for key, record in after.items():
        assert record.response == before[key].response  # the stored response, judged again
        judges = {j.judge for j in record.judgments}
        assert judges == ({"bespoke", "lampqa_pairwise"} if record.system == "direct-full" else {"bespoke"})
        assert all(j.error is None for j in record.judgments) and 0 <= record.scores["bespoke"] <= 100
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judges"] == ["bespoke", "lampqa_pairwise"] and summary["dry_run"]

    again = atelier(
        "rescore",
        str(original),
        "--judge",
        "bespoke",
        "--judge",
        '{"name": "lampqa_pairwise", "baseline": "direct-none"}',
        "--model",
        "scripted?seed=3",
        "--no-progress",
        "--out",
        str(folder),
        env=env,
    )
    assert again.returncode == 0, again.stderr
    assert len(lines(folder / "ledger.jsonl")) == len(ledger)  # resumed: everything was done

    wrong = atelier("rescore", str(original), "--judge", "locomo", "--no-progress", env=env)
    assert wrong.returncode == 2 and "judge 'locomo' does not fit benchmark 'sample'" in wrong.stderr


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    judges_cli.register(app, typer.Typer())
    return app


def write_run(
    folder: Path,
    scores: dict[tuple[str, str], dict[str, float | None]],
    failed: tuple[tuple[str, str], ...] = (),
    details: dict[tuple[str, str], dict] | None = None,
) -> None:
    folder.mkdir(parents=True)
    results = ResultsFile(folder / "results.jsonl")
    for (case, system), criteria in scores.items():
        judgment = JudgeResult(
            judge="bespoke",
            score=sum(v for v in criteria.values() if v is not None and math.isfinite(v)),
            criteria=criteria,
            scale="0-100",
            details=(details or {}).get((case, system), {}),
        )
        if (case, system) in failed:
            judgment = JudgeResult(judge="bespoke", scale="0-100", error="the model's output could not be scored")
        results.append(
            ResultRecord(
                key=f"{case}::{system}",
                run_id="r",
                case_id=case,
                system=system,
                benchmark="t",
                user_id="u",
                setting="s",
                status="ok",
                response=SystemResponse(text="x"),
                judgments=[judgment],
                scores={"bespoke": judgment.score},
            )
        )


def write_labels(path: Path, rows: list[tuple]) -> Path:
    path.write_text(
        "\n".join(json.dumps({"case_id": c, "system": s, "criterion": k, "score": v}) for c, s, k, v in rows) + "\n"
    )
    return path


def strict(text: str) -> dict:
    """JSON that must not hold NaN or Infinity (Python's json reads them; a strict reader does not)."""

    def refuse(constant: str):
        raise AssertionError(f"{constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


def numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def test_meta_eval_matches_hand_worked_pca_mard_and_correlations(tmp_path, cli) -> None:
    write_run(
        tmp_path / "run",
        {
            ("q1", "a"): {"tone": 5, "need_alignment": 4},
            ("q1", "b"): {"tone": 3, "need_alignment": 2},
            ("q2", "a"): {"tone": 2},
            ("q2", "b"): {"tone": 4},
        },
    )
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [
            ("q1", "a", "tone", 4),
            ("q1", "b", "tone", 4),
            ("q2", "a", "tone", 1),
            ("q2", "b", "tone", 5),
            ("q1", "a", "need_alignment", 5),
            ("q1", "b", "need_alignment", 1),
        ],
    )
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    report = strict(result.stdout)
    tone = report["criteria"]["tone"]
    # q1: model prefers a (+2), humans tie -> disagree; q2: both prefer b -> agree
    assert (tone["n"], tone["n_pairs"], tone["pca"], tone["mard"]) == (4, 2, 0.5, 1.0)
    # model 5,3,2,4 vs human 4,4,1,5: r = 5 / sqrt(5 * 9); Spearman on ranks (4,2,1,3) vs (2.5,2.5,1,4)
    assert tone["pearson"]["statistic"] == pytest.approx(5 / 45**0.5)
    assert tone["spearman"]["statistic"] == pytest.approx(3 / 22.5**0.5)
    need = report["criteria"]["need_alignment"]
    assert (need["pca"], need["mard"]) == (1.0, 1.0)
    # two responses: Pearson is +1 and its p-value 1; scipy's Spearman p-value is NaN there, and must be null
    assert need["pearson"]["statistic"] == pytest.approx(1.0) and need["spearman"]["p_value"] is None
    assert "pooled" not in report
    average = report["average"]
    assert average["criteria"] == ["need_alignment", "tone"]
    assert average["pca"] == pytest.approx((1.0 + 0.5) / 2)
    assert average["pearson"] == pytest.approx((1.0 + 5 / 45**0.5) / 2)
    assert report["labels"] | {"file": None} == {
        "file": None,
        "format": "jsonl",
        "read": 6,
        "unlabelled_rows": 0,
        "matched": 6,
        "not_selected": 0,
        "unmatched": 0,
        "unmatched_by_reason": {},
    }

    only = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels), "--criterion", "tone"]
    )
    assert only.exit_code == 0, only.output
    narrowed = strict(only.stdout)
    assert list(narrowed["criteria"]) == ["tone"] and narrowed["labels"]["not_selected"] == 2
    assert narrowed["average"]["pca"] == 0.5

    unknown = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels), "--criterion", "tnoe"]
    )
    assert "--criterion tnoe: judge 'bespoke' has no such criterion" in str(unknown.exception)

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case_id": "q1", "system": "a", "criterion": "tone"}\n')
    result = CliRunner().invoke(cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(bad)])
    assert result.exit_code != 0 and "bad.jsonl:1" in str(result.exception) and "score" in str(result.exception)


def test_criteria_on_different_scales_are_never_pooled(tmp_path, cli) -> None:
    """A 1-5 rating agreeing perfectly (+1) and a 0-1 recall disagreeing perfectly (-1): pooled, the
    scale gap alone would make them correlate strongly; per criterion they are +1 and -1, Avg. 0."""
    judge = {("q1", "a"): (1, 0.1), ("q1", "b"): (2, 0.2), ("q2", "a"): (3, 0.3), ("q2", "b"): (4, 0.4)}
    human = {("q1", "a"): (1, 0.4), ("q1", "b"): (2, 0.3), ("q2", "a"): (3, 0.2), ("q2", "b"): (4, 0.1)}
    write_run(tmp_path / "run", {key: {"rating": r, "recall": c} for key, (r, c) in judge.items()})
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [
            row
            for (case, system), (r, c) in human.items()
            for row in ((case, system, "rating", r), (case, system, "recall", c))
        ],
    )
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    report = strict(result.stdout)
    rating, recall = report["criteria"]["rating"], report["criteria"]["recall"]
    assert rating["pearson"]["statistic"] == pytest.approx(1.0) and rating["spearman"]["statistic"] == pytest.approx(
        1.0
    )
    assert recall["pearson"]["statistic"] == pytest.approx(-1.0) and recall["spearman"]["statistic"] == pytest.approx(
        -1.0
    )
    assert (rating["pca"], recall["pca"]) == (1.0, 0.0)  # q1: a<b for both sides on rating; a<b vs a>b on recall
    assert report["average"]["pearson"] == pytest.approx(0.0) and report["average"]["spearman"] == pytest.approx(0.0)
    assert report["average"]["pca"] == 0.5
    pooled = stats.pearsonr([v for r in judge.values() for v in r], [v for r in human.values() for v in r]).statistic
    assert pooled > 0.9  # what a pooled figure would have claimed
    assert not [n for n in numbers(report) if n == pytest.approx(pooled, abs=1e-6)]


def test_pca_has_a_seeded_bootstrap_interval(tmp_path, cli) -> None:
    # six cases, two systems each: judge prefers a everywhere, the labels agree on four cases of six
    write_run(tmp_path / "run", {(f"q{i}", s): {"tone": 5 if s == "a" else 3} for i in range(6) for s in "ab"})
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [
            (f"q{i}", s, "tone", (4 if s == "a" else 2) if i < 4 else (2 if s == "a" else 4))
            for i in range(6)
            for s in "ab"
        ],
    )
    args = ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    first, again, other = (strict(CliRunner().invoke(cli, args + extra).stdout) for extra in ([], [], ["--seed", "5"]))
    tone = first["criteria"]["tone"]
    assert tone["pca"] == pytest.approx(4 / 6)
    expected = percentile_bootstrap([0, 0, 1, 1, 1, 1], 0.95, 10_000, 0)
    assert (tone["pca_ci"]["low"], tone["pca_ci"]["high"]) == (expected.low, expected.high)
    assert tone["pca_ci"] | {"low": 0, "high": 0} == {
        "low": 0,
        "high": 0,
        "confidence": 0.95,
        "n_resamples": 10_000,
        "seed": 0,
    }
    assert 0 <= expected.low < 4 / 6 < expected.high <= 1
    assert again["criteria"]["tone"]["pca_ci"] == tone["pca_ci"]  # seeded: the same interval
    assert other["bootstrap"]["seed"] == 5 and other["criteria"]["tone"]["pca_ci"]["seed"] == 5


def test_labels_matching_nothing_are_counted_and_listed(tmp_path, cli) -> None:
    write_run(
        tmp_path / "run",
        {
            ("q1", "a"): {"tone": 5, "style": None, "depth": float("nan")},
            ("q1", "b"): {"tone": 3},
            ("q2", "a"): {"tone": 4},
        },
        failed=(("q2", "a"),),
    )
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [
            ("q1", "a", "tone", 4),
            ("q1", "b", "tone", 2),  # matched
            ("q9", "a", "tone", 3),  # no such case
            ("q1", "c", "tone", 3),  # no such system on q1
            ("q2", "a", "tone", 3),  # the judgment failed
            ("q1", "a", "tnoe", 3),  # no such criterion
            ("q1", "a", "style", 3),  # the judge gave no score
            ("q1", "a", "depth", 3),  # nor a finite one
        ],
    )
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    report = strict(result.stdout)
    assert (report["labels"]["matched"], report["labels"]["unmatched"]) == (2, 6)
    assert report["labels"]["unmatched_by_reason"] == {
        "no_judge_score": 2,
        "unknown_case": 1,
        "unknown_system": 1,
        "not_judged": 1,
        "unknown_criterion": 1,
    }
    assert [(u["line"], u["case_id"], u["system"], u["criterion"], u["reason"]) for u in report["unmatched"]] == [
        (3, "q9", "a", "tone", "unknown_case"),
        (4, "q1", "c", "tone", "unknown_system"),
        (5, "q2", "a", "tone", "not_judged"),
        (6, "q1", "a", "tnoe", "unknown_criterion"),
        (7, "q1", "a", "style", "no_judge_score"),
        (8, "q1", "a", "depth", "no_judge_score"),
    ]
    assert report["criteria"]["tone"]["n"] == 2


def test_no_matching_label_is_exit_2_with_one_line(tmp_path) -> None:
    write_run(tmp_path / "run", {("q1", "a"): {"tone": 5}, ("q1", "b"): {"tone": 3}})
    labels = write_labels(tmp_path / "labels.jsonl", [("q7", "a", "tone", 4), ("q1", "a", "style", 2)])
    done = atelier(
        "meta-eval",
        str(tmp_path / "run"),
        "--judge",
        "bespoke",
        "--labels",
        str(labels),
        env={**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0
    assert (
        f"error: none of the 2 labels in {labels} matches a score of judge 'bespoke' in {tmp_path / 'run'} "
        "(no response to this case in the run: 1; the judge has no such criterion on this response: 1)"
    ) in done.stderr


def test_duplicate_labels_name_both_lines(tmp_path, cli) -> None:
    write_run(tmp_path / "run", {("q1", "a"): {"tone": 5}, ("q1", "b"): {"tone": 3}})
    labels = write_labels(
        tmp_path / "labels.jsonl", [("q1", "a", "tone", 4), ("q1", "b", "tone", 2), ("q1", "a", "tone", 5)]
    )
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert "labels.jsonl:3: a second label for case 'q1', system 'a', criterion 'tone' (the first is on line 1)" in str(
        result.exception
    )


def test_jsonl_lines_split_on_newlines_only(tmp_path, cli) -> None:
    """U+2028, U+2029 and U+0085 may stand raw inside a JSON string: they do not end a JSON Lines line."""
    write_run(tmp_path / "run", {("q1", "a"): {"tone": 5}, ("q1", "b"): {"tone": 3}})
    labels = tmp_path / "labels.jsonl"
    rows = [
        {"case_id": "q1", "system": "a", "criterion": "tone", "score": 4, "feedback": "warm\u2028but\u0085long\u2029"},
        {"case_id": "q1", "system": "b", "criterion": "tone", "score": 2},
    ]
    labels.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    assert len(labels.read_text(encoding="utf-8").splitlines()) > 3  # what str.splitlines() would have cut
    from atelier.runs.studies.meta_eval import read_labels

    read = read_labels(labels)
    assert [lb.score for lb in read.labels] == [4, 2] and read.labels[0].feedback == "warm\u2028but\u0085long\u2029"
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    assert strict(result.stdout)["criteria"]["tone"]["pca"] == 1.0


def pqr_details(scores: dict[str, list[float]], wording: str = "covers") -> dict:
    """A PQR judgment's details: sub-criteria by dimension (P: GOAL, CONT; Q: DEIN)."""
    axis_of = {"GOAL": "P", "CONT": "P", "DEIN": "Q"}
    details: dict = {}
    for code, values in scores.items():
        rows = [
            {"id": f"{code}-{i}", "criterion": f"{code} {wording} {i}", "weight": 1 / len(values), "score": v}
            for i, v in enumerate(values, start=1)
        ]
        details.setdefault(axis_of[code], {"dimensions": {}})["dimensions"][code] = {"criteria": rows}
    return details


def test_pqr_sub_criteria_agree_per_query_and_sub_criterion_by_dimension(tmp_path, cli) -> None:
    judge = {
        ("q1", "a"): {"GOAL": [8, 6], "DEIN": [5]},
        ("q1", "b"): {"GOAL": [4, 6], "DEIN": [7]},
        ("q2", "a"): {"GOAL": [3, 9], "DEIN": [2]},
        ("q2", "b"): {"GOAL": [5, 1], "DEIN": [2]},
    }
    write_run(
        tmp_path / "run",
        {key: {"GOAL": sum(v["GOAL"]) / 2, "DEIN": v["DEIN"][0]} for key, v in judge.items()},
        details={key: pqr_details(v) for key, v in judge.items()},
    )
    human = {
        ("q1", "a"): {"GOAL": [7, 5], "DEIN": [6]},
        ("q1", "b"): {"GOAL": [5, 6], "DEIN": [6]},
        ("q2", "a"): {"GOAL": [6, 8], "DEIN": [2]},
        ("q2", "b"): {"GOAL": [2, 2], "DEIN": [3]},
    }
    rows = [
        (c, s, f"{code}-{i}", v)
        for (c, s), dims in human.items()
        for code, values in dims.items()
        for i, v in enumerate(values, start=1)
    ]
    labels = write_labels(tmp_path / "labels.jsonl", rows + [("q1", "a", "GOAL", 6), ("q1", "b", "GOAL", 5.5)])
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    report = strict(result.stdout)
    subs = report["sub_criteria"]
    # GOAL pairs (query, sub-criterion): q1 GOAL-1 judge a>b, human a>b agree; q1 GOAL-2 judge tie, human a<b
    # disagree; q2 GOAL-1 judge a<b, human a>b disagree; q2 GOAL-2 judge a>b, human a>b agree -> 2 of 4
    goal = subs["dimensions"]["GOAL"]
    assert (goal["n"], goal["n_pairs"], goal["pca"]) == (8, 4, 0.5)
    assert goal["mard"] == pytest.approx((1 + 1 + 1 + 0 + 3 + 1 + 3 + 1) / 8)
    # DEIN: q1 judge a<b, human tie -> disagree; q2 judge tie, human a<b -> disagree
    dein = subs["dimensions"]["DEIN"]
    assert (dein["n_pairs"], dein["pca"], dein["mard"]) == (2, 0.0, pytest.approx((1 + 1 + 0 + 1) / 4))
    assert subs["scale"] == "0-10" and subs["all"]["n_pairs"] == 6 and subs["all"]["pca"] == pytest.approx(2 / 6)
    assert subs["all"]["mard"] == pytest.approx((11 + 3) / 12)  # Appendix C: over every (query, report, criterion)
    assert subs["dimension_average"]["pca"] == pytest.approx((0.5 + 0.0) / 2)
    units = {(u["case_id"], u["sub_criterion"]): u for u in subs["per_query"]}
    assert len(units) == 6 and units[("q1", "GOAL-2")] | {"mard": None} == {
        "case_id": "q1",
        "sub_criterion": "GOAL-2",
        "dimension": "GOAL",
        "criterion_text": "GOAL covers 2",
        "responses": 2,
        "pairs": 1,
        "agreeing_pairs": 0,
        "mard": None,
    }
    assert list(report["criteria"]) == ["GOAL"]  # the dimension score labelled on its own
    assert report["criteria"]["GOAL"]["pca"] == 1.0  # judge 7 vs 5, labels 6 vs 5.5

    # --criterion GOAL keeps GOAL and its sub-criteria
    only = strict(
        CliRunner()
        .invoke(
            cli,
            ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels), "--criterion", "GOAL"],
        )
        .stdout
    )
    assert list(only["sub_criteria"]["dimensions"]) == ["GOAL"] and only["labels"]["not_selected"] == 4


def test_pqr_sub_criteria_worded_differently_do_not_match(tmp_path, cli) -> None:
    """Sub-criterion ids repeat whenever criteria are generated anew; a label on another wording is unmatched."""
    judge = {("q1", "a"): {"GOAL": [8]}, ("q1", "b"): {"GOAL": [4]}}
    write_run(
        tmp_path / "run",
        {key: {"GOAL": v["GOAL"][0]} for key, v in judge.items()},
        details={key: pqr_details(v) for key, v in judge.items()},
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps({"case_id": "q1", "system": s, "criterion": "GOAL-1", "score": v, "criterion_text": text})
            for s, v, text in [("a", 7, "GOAL  covers\n1"), ("b", 2, "GOAL is cited 1")]
        )
        + "\n"
    )
    result = CliRunner().invoke(
        cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    report = strict(result.stdout)
    assert report["labels"]["matched"] == 1  # the wording differs in whitespace only: the same criterion
    assert [(u["system"], u["reason"]) for u in report["unmatched"]] == [("b", "different_wording")]


def test_meta_eval_against_another_judges_run_and_bespoke_feedback_accuracy(tmp_path, cache_dir, cli) -> None:
    recipe = parse_recipe(
        {
            "name": "m",
            "benchmark": {"name": "sample", "limit": 2},
            "systems": [
                {"name": "none", "memory": {"backend": "none"}},
                {"name": "full", "memory": {"backend": "full"}},
            ],
            "judges": [{"name": "bespoke"}],
            "run": {"out_dir": str(tmp_path)},
        }
    )
    first = run_recipe(recipe, tmp_path / "first", progress=False)
    another_model = parse_recipe(
        {**recipe.model_dump(mode="json", exclude={"source"}), "models": {"judge": {"model": "scripted?seed=9"}}}
    )
    second = run_recipe(another_model, tmp_path / "second", progress=False)
    same = CliRunner().invoke(cli, ["meta-eval", str(first.path), "--judge", "bespoke", "--against", str(first.path)])
    assert same.exit_code == 0, same.output
    report = strict(same.stdout)
    for name, figures in report["criteria"].items():  # a judge agrees with itself on every criterion
        assert figures["mard"] == 0.0 and figures["pca"] == 1.0, name
    assert report["labels"]["unmatched"] == 0 and "pooled" not in report
    assert set(report["average"]["criteria"]) == {
        "need_alignment",
        "content_depth",
        "tone",
        "explanation_style",
        "recall",
    }

    other = CliRunner().invoke(
        cli, ["meta-eval", str(first.path), "--judge", "bespoke", "--against", str(second.path), "--feedback"]
    )
    assert other.exit_code == 0, other.output
    report = strict(other.stdout)
    feedback = report["feedback_accuracy"]
    criteria = {"need_alignment", "content_depth", "tone", "explanation_style"}
    assert set(feedback["criteria"]) == criteria and all(f["n"] == 2 * 2 for f in feedback["criteria"].values())
    # 2 cases x 2 systems x 4 criteria, each with feedback on both sides; Avg. = mean of the four accuracies
    assert feedback["average"]["n"] == 2 * 2 * 4 and set(feedback["average"]["criteria"]) == criteria
    assert feedback["average"]["accuracy"] == pytest.approx(
        sum(f["accuracy"] for f in feedback["criteria"].values()) / 4
    )
    assert report["dry_run"] is True


def test_bench_judge_reuses_criteria_once_per_pair(cache_dir) -> None:
    from atelier.runs.bench.judge import bench_judge

    result = asyncio.run(bench_judge(pairs=3, systems=3))
    reuse, fresh = result["with_reuse"], result["without_reuse"]
    assert reuse["failed"] == fresh["failed"] == 0 and reuse["reports"] == 9
    assert reuse["criteria_sets"]["P"] == 3 and reuse["criteria_calls"] == 3 * 5 + result["tasks"] * 4
    assert fresh["criteria_calls"] == 9 * (5 + 4)
    assert result["reuse_ratio"] == pytest.approx(reuse["prompt_tokens_per_report"] / fresh["prompt_tokens_per_report"])
    assert result["reuse_ratio"] < 0.8
