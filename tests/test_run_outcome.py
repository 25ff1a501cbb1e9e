"""Honest ends of a run: exit codes, counts and reasons, resume messages, a summary of exactly the
current recipe, unknown costs, small checkpoints that still resume mid-episode."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from atelier.agents.models.ledger import LedgerEntry, ledger_totals
from atelier.runs.cli import app
from atelier.runs.execution.runner import Runner, run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK, outcome_of
from tests.openai_stub import OpenAIStub
from tests.test_runner import recipe


def toml_recipe(tmp_path, model: str, max_retries: int = 1, benchmark: str = "tiny", limit: int | None = None) -> str:
    path = tmp_path / "recipe.toml"
    limit_line = f"limit = {limit}\n" if limit else ""
    path.write_text(f'''name = "t"
[benchmark]
name = "{benchmark}"
{limit_line}
[models.system]
model = "{model}"
max_retries = {max_retries}
retry_backoff_s = 0.001
[models.judge]
model = "{model}"
max_retries = {max_retries}
retry_backoff_s = 0.001
[[systems]]
name = "none"
memory = {{ backend = "none" }}
[[systems]]
name = "full"
memory = {{ backend = "full" }}
[[judges]]
name = "lampqa_aspects"
''')
    return str(path)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_costs_of_unpriced_models_are_unknown_not_zero():
    def entry(cost, cache_hit=False):
        return LedgerEntry(ts=0, run_id="r", role="system", model="m", call_id="c", cost_usd=cost, cache_hit=cache_hit)

    assert ledger_totals([entry(None), entry(None)])["cost_usd"] is None
    assert ledger_totals([entry(None), entry(None)])["unpriced_calls"] == 2
    mixed = ledger_totals([entry(0.5), entry(None)])
    assert mixed["cost_usd"] == 0.5 and mixed["unpriced_calls"] == 1
    assert ledger_totals([entry(0.0, cache_hit=True)])["cost_usd"] == 0.0  # served from the cache: free
    assert ledger_totals([])["cost_usd"] == 0.0


def test_an_unpriced_model_over_http_reports_unknown_cost(tmp_path, cache_dir):
    with OpenAIStub() as stub:
        data = recipe(tmp_path).model_dump(mode="python")
        for role in ("system", "judge"):
            data["models"][role] = {
                "model": "openai/atelier-unpriced-model",
                "api_base": stub.base_url,
                "api_key": "sk-stub",
                "max_retries": 0,
            }
        folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    summary = json.loads(folder.summary.read_text())
    assert summary["ledger"]["provider_calls"] > 0
    assert summary["ledger"]["cost_usd"] is None
    assert summary["ledger"]["unpriced_calls"] == summary["ledger"]["provider_calls"]
    assert summary["systems"]["full"]["usage"]["calls"]["system"]["cost_usd"] is None
    assert "$0.0" not in folder.report.read_text()


def test_failed_episodes_make_the_run_exit_non_zero_with_counts_and_reasons(tmp_path, cache_dir):
    path = toml_recipe(tmp_path, "scripted?error_rate=1")
    result = CliRunner().invoke(app, ["run", path, "--no-progress", "--out", str(tmp_path / "run")])
    assert result.exit_code == EXIT_FAILURES, result.output
    assert "episodes: 0 scored, 6 failed (of 6)" in result.stderr
    assert "most common episode failures:" in result.stderr
    reasons = [
        line for line in result.stderr.splitlines() if " x ModelCallError: system model scripted?error_rate=1" in line
    ]
    assert reasons and sum(int(line.split(" x ")[0]) for line in reasons) <= 6  # the top three reasons
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path / "run")  # the folder, still last
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["episodes"]["failed"] == 6
    assert sum(r["count"] for r in summary["episodes"]["failure_reasons"]) == 6


def test_a_clean_run_exits_zero_and_a_resumed_one_says_what_was_done(tmp_path, cache_dir):
    path = toml_recipe(tmp_path, "scripted")
    first = CliRunner().invoke(app, ["run", path, "--no-progress", "--out", str(tmp_path / "run")])
    assert first.exit_code == EXIT_OK, first.output
    assert "episodes: 6 scored, 0 failed (of 6)" in first.stderr and "resuming" not in first.stderr
    again = CliRunner().invoke(app, ["run", path, "--no-progress", "--out", str(tmp_path / "run")])
    assert again.exit_code == EXIT_OK
    assert f"resuming {tmp_path / 'run'}: 6 of 6 episodes already done, 0 to run" in again.stderr


def test_failed_judgments_are_counted_and_fail_the_exit_code(tmp_path, cache_dir, monkeypatch):
    from atelier.agents.judges.lampqa import LampQAAspectJudge
    from atelier.agents.models.gateway import ModelCallError

    async def broken(self, case, response, env, prepared=None):
        raise ModelCallError("judge model down", role="judge", model="m", attempts=1)

    monkeypatch.setattr(LampQAAspectJudge, "judge_once", broken)  # the judge records it as a failed judgment
    runner = Runner(recipe(tmp_path), tmp_path / "run", progress=False)
    asyncio.run(runner.run())
    outcome = runner.outcome
    assert (outcome.scored, outcome.unscored, outcome.failed, outcome.missing) == (0, 6, 0, 0)
    assert outcome.exit_code == EXIT_FAILURES
    assert outcome.judgment_reasons.most_common(1)[0] == ("lampqa_aspects: judge model down", 6)


def test_outcome_counts_missing_episodes_of_the_recipe_only():
    from atelier.runs.folder.results import ResultRecord

    def record(key, status="ok"):
        case, system = key.split("::")
        return ResultRecord(
            key=key,
            run_id="r",
            case_id=case,
            system=system,
            benchmark="b",
            user_id="u",
            setting="s",
            status=status,
            error=None if status == "ok" else "boom",
        )

    records = [record("a::s"), record("b::s", "error"), record("old::s")]
    outcome = outcome_of(records, ["a::s", "b::s", "c::s"], judges=[])
    assert (outcome.expected, outcome.scored, outcome.failed, outcome.missing) == (3, 1, 1, 1)


def test_lowering_the_limit_on_resume_summarizes_exactly_the_current_cases(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path), tmp_path / "run", progress=False)
    assert json.loads(folder.summary.read_text())["systems"]["full"]["judges"]["lampqa_aspects"]["n"] == 3
    run_recipe(recipe(tmp_path).with_overrides(limit=2), folder.path, progress=False)
    summary = json.loads(folder.summary.read_text())
    assert summary["n_cases"] == 2
    for entry in summary["systems"].values():
        assert entry["n"] == 2 and entry["judges"]["lampqa_aspects"]["n"] == 2
    assert summary["episodes"]["expected"] == 4 and all(c["n"] == 2 for c in summary["comparisons"])


def test_systems_seed_and_concurrency_overrides(tmp_path, cache_dir):
    base = recipe(tmp_path)
    only = base.with_overrides(systems=["full"], seed=7, concurrency=9)
    assert [s.name for s in only.systems] == ["full"] and only.seed == 7 and only.run.concurrency == 9
    from atelier.benchmarks.common.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--systems: no system 'ful' in recipe 't'; valid: none, full"):
        base.with_overrides(systems=["ful"])
    folder = run_recipe(only, tmp_path / "run", progress=False)
    assert {r["system"] for r in lines(folder.results)} == {"full"}
    # the other system can be added to the same folder later: a system kept under its name is unchanged
    run_recipe(base.with_overrides(seed=7), folder.path, progress=False)
    assert {r["system"] for r in lines(folder.results)} == {"none", "full"}


def test_checkpoints_stay_small_and_an_episode_resumes_from_its_last_checkpoint(tmp_path, cache_dir, monkeypatch):
    """The judge fails once, after the answer was checkpointed; resumed, the episode continues at
    the judge from the compressed checkpoints: the answer is neither asked again nor served from the
    cache."""
    from atelier.agents.judges.lampqa import LampQAAspectJudge
    from atelier.agents.models.local_model import LocalServerDied

    original = LampQAAspectJudge.judge

    async def crash(self, case, response, env):  # what fails the episode, not the judgment alone (an EpisodeFailure)
        raise LocalServerDied("the judge's model server died")

    monkeypatch.setattr(LampQAAspectJudge, "judge", crash)
    folder = run_recipe(recipe(tmp_path), tmp_path / "run", progress=False)
    assert {r["status"] for r in lines(folder.results)} == {"error"}
    import sqlite3

    def pending_writes() -> int:
        with sqlite3.connect(str(folder.checkpoints)) as conn:
            return conn.execute("SELECT COUNT(*) FROM writes").fetchone()[0]

    assert pending_writes() > 0  # unfinished episodes keep what their last step wrote
    answered_before = [e for e in lines(folder.ledger) if e["node"] == "direct"]
    assert len(answered_before) == 6

    monkeypatch.setattr(LampQAAspectJudge, "judge", original)
    run_recipe(recipe(tmp_path), folder.path, progress=False)
    latest = ResultsFile(folder.results).load()
    assert len(latest) == 6 and all(r.ok and r.scores["lampqa_aspects"] is not None for r in latest.values())
    assert [e for e in lines(folder.ledger) if e["node"] == "direct"] == answered_before

    assert pending_writes() == 0  # finished episodes keep their checkpoints, not their tasks' writes
    assert folder.checkpoints.stat().st_size / 6 < 100_000
