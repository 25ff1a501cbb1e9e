"""`atelier rescore` on a finished quickstart run (no system call), `atelier meta-eval` against hand-worked
agreement figures and BESPOKE's feedback accuracy, and `atelier bench judge`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agents.judges.base import JudgeResult
from agents.response import SystemResponse
from agents.settings import ROLE_FALLBACK
from runs.cli import judges as judges_cli
from runs.recipe import parse_recipe
from runs.results import ResultRecord, ResultsFile
from runs.runner import run_recipe

ROOT = Path(__file__).resolve().parent.parent


def atelier(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runs.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def latest(path: Path) -> dict[str, ResultRecord]:
    return ResultsFile(path).load()


def test_rescore_a_quickstart_run_with_other_judges_calls_no_system(tmp_path) -> None:
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    original = tmp_path / "runs" / "quickstart"
    done = atelier("run", "runs/recipes/quickstart.toml", "--limit", "2", "--no-progress", "--out", str(original), env=env)
    assert done.returncode == 0, done.stderr

    done = atelier("rescore", str(original), "--judge", "bespoke", "--judge",
                   '{"name": "lampqa_pairwise", "baseline": "direct-none"}', "--model", "scripted?seed=3",
                   "--no-progress", env=env)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == original.parent and folder.name.startswith("quickstart-rescore-")

    config = json.loads((folder / "config.json").read_text())
    assert config["rescore_of"] == {"run_id": "quickstart", "path": str(original.resolve()), "episodes": 4,
                                    "failed_episodes_left_out": 0}
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

    again = atelier("rescore", str(original), "--judge", "bespoke", "--judge",
                    '{"name": "lampqa_pairwise", "baseline": "direct-none"}', "--model", "scripted?seed=3",
                    "--no-progress", "--out", str(folder), env=env)
    assert again.returncode == 0, again.stderr
    assert len(lines(folder / "ledger.jsonl")) == len(ledger)  # resumed: everything was done

    wrong = atelier("rescore", str(original), "--judge", "locomo", "--no-progress", env=env)
    assert wrong.returncode == 2 and "judge 'locomo' does not fit benchmark 'sample'" in wrong.stderr


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    judges_cli.register(app, typer.Typer())
    return app


def write_run(folder: Path, scores: dict[tuple[str, str], dict[str, float]]) -> None:
    folder.mkdir(parents=True)
    results = ResultsFile(folder / "results.jsonl")
    for (case, system), criteria in scores.items():
        judgment = JudgeResult(judge="bespoke", score=sum(criteria.values()), criteria=criteria, scale="0-100")
        results.append(ResultRecord(key=f"{case}::{system}", run_id="r", case_id=case, system=system, benchmark="t",
                                    user_id="u", setting="s", status="ok", response=SystemResponse(text="x"),
                                    judgments=[judgment], scores={"bespoke": judgment.score}))


def test_meta_eval_matches_hand_worked_pca_mard_and_correlations(tmp_path, cli) -> None:
    write_run(tmp_path / "run", {("q1", "a"): {"tone": 5, "need_alignment": 4}, ("q1", "b"): {"tone": 3, "need_alignment": 2},
                                 ("q2", "a"): {"tone": 2}, ("q2", "b"): {"tone": 4}})
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(json.dumps({"case_id": c, "system": s, "criterion": k, "score": v}) for c, s, k, v in [
        ("q1", "a", "tone", 4), ("q1", "b", "tone", 4), ("q2", "a", "tone", 1), ("q2", "b", "tone", 5),
        ("q1", "a", "need_alignment", 5), ("q1", "b", "need_alignment", 1)]) + "\n")
    result = CliRunner().invoke(cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(labels)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    tone = report["criteria"]["tone"]
    # q1: model prefers a (+2), humans tie -> disagree; q2: both prefer b -> agree
    assert (tone["n"], tone["n_pairs"], tone["pca"], tone["mard"]) == (4, 2, 0.5, 1.0)
    # model 5,3,2,4 vs human 4,4,1,5: r = 5 / sqrt(5 * 9); Spearman on ranks (4,2,1,3) vs (2.5,2.5,1,4)
    assert tone["pearson"]["statistic"] == pytest.approx(5 / 45 ** 0.5)
    assert tone["spearman"]["statistic"] == pytest.approx(3 / 22.5 ** 0.5)
    assert report["criteria"]["need_alignment"]["pca"] == 1.0
    assert report["pooled"]["n_pairs"] == 3 and report["pooled"]["pca"] == pytest.approx(2 / 3)
    assert report["pooled"]["mard"] == 1.0

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case_id": "q1", "system": "a", "criterion": "tone"}\n')
    result = CliRunner().invoke(cli, ["meta-eval", str(tmp_path / "run"), "--judge", "bespoke", "--labels", str(bad)])
    assert result.exit_code != 0 and "bad.jsonl:1" in str(result.exception) and "score" in str(result.exception)


def test_meta_eval_against_another_judges_run_and_bespoke_feedback_accuracy(tmp_path, cache_dir, cli) -> None:
    recipe = parse_recipe({
        "name": "m", "benchmark": {"name": "sample", "limit": 2},
        "systems": [{"name": "none", "memory": {"backend": "none"}}, {"name": "full", "memory": {"backend": "full"}}],
        "judges": [{"name": "bespoke"}], "run": {"out_dir": str(tmp_path)},
    })
    first = run_recipe(recipe, tmp_path / "first", progress=False)
    another_model = parse_recipe({**recipe.model_dump(mode="json", exclude={"source"}),
                                  "models": {"judge": {"model": "scripted?seed=9"}}})
    second = run_recipe(another_model, tmp_path / "second", progress=False)
    same = CliRunner().invoke(cli, ["meta-eval", str(first.path), "--judge", "bespoke", "--against", str(first.path)])
    assert same.exit_code == 0, same.output
    pooled = json.loads(same.stdout)["pooled"]
    assert pooled["mard"] == 0.0 and pooled["pca"] == 1.0  # a judge agrees with itself

    other = CliRunner().invoke(cli, ["meta-eval", str(first.path), "--judge", "bespoke", "--against", str(second.path),
                                     "--feedback"])
    assert other.exit_code == 0, other.output
    report = json.loads(other.stdout)
    feedback = report["feedback_accuracy"]
    assert feedback["all"]["n"] == 2 * 2 * 4  # 2 cases x 2 systems x 4 criteria, each with feedback on both sides
    assert 0 <= feedback["all"]["accuracy"] <= 1 and set(feedback) == {"all", "need_alignment", "content_depth",
                                                                       "tone", "explanation_style"}
    assert report["dry_run"] is True


def test_bench_judge_reuses_criteria_once_per_pair(cache_dir) -> None:
    from agents.judges.bench import bench_judge

    result = asyncio.run(bench_judge(pairs=3, systems=3))
    reuse, fresh = result["with_reuse"], result["without_reuse"]
    assert reuse["failed"] == fresh["failed"] == 0 and reuse["reports"] == 9
    assert reuse["criteria_sets"]["P"] == 3 and reuse["criteria_calls"] == 3 * 5 + result["tasks"] * 4
    assert fresh["criteria_calls"] == 9 * (5 + 4)
    assert result["reuse_ratio"] == pytest.approx(reuse["prompt_tokens_per_report"] / fresh["prompt_tokens_per_report"])
    assert result["reuse_ratio"] < 0.8
