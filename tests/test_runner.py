"""The runner end to end on the tiny benchmark with the scripted model: files, resume, failures,
the gold boundary."""

from __future__ import annotations

import json

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.runs.execution.runner import Runner, run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from tests.conftest import GOLD_SENTINEL


def recipe(tmp_path, model: str = "scripted", **run):
    return parse_recipe(
        {
            "name": "t",
            "benchmark": {"name": "tiny"},
            "models": {
                "system": {"model": model, "retry_backoff_s": 0.001, "max_retries": 1},
                "judge": {"model": "scripted"},
            },
            "systems": [
                {"name": "none", "memory": {"backend": "none"}},
                {"name": "full", "memory": {"backend": "full"}},
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out"), **run},
        }
    )


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_run_writes_every_output(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path), progress=False)
    results = lines(folder.results)
    assert sorted(r["key"] for r in results) == sorted(f"tiny:{i}::{s}" for i in range(3) for s in ("none", "full"))
    assert all(r["status"] == "ok" and r["dry_run"] for r in results)
    full = [r for r in results if r["system"] == "full"]
    assert all(r["user_context"]["form"] == "raw" and r["user_context"]["event_ids"] for r in full)
    assert all(0 <= r["scores"]["lampqa_aspects"] <= 1 for r in results)

    summary = json.loads(folder.summary.read_text())
    assert set(summary["systems"]) == {"none", "full"} and summary["dry_run"] is True
    for name, entry in summary["systems"].items():
        stats = entry["judges"]["lampqa_aspects"]
        scores = [r["scores"]["lampqa_aspects"] for r in results if r["system"] == name]
        assert stats["n"] == 3 and stats["mean"] == pytest.approx(sum(scores) / 3)
        assert stats["ci95"][0] <= stats["mean"] <= stats["ci95"][1]
    assert summary["comparisons"][0]["n"] == 3

    ledger = lines(folder.ledger)
    # 6 answers + 3 cases x 2 systems x 2 aspects judged
    assert len(ledger) == 6 + 12 and {e["role"] for e in ledger} == {"system", "lampqa_judge"}
    assert all(e["case_id"] and e["system"] and e["node"] in ("direct", "run_judge") for e in ledger)

    config = json.loads(folder.config.read_text())
    assert "dry_run" not in config and config["cases"] == ["tiny:0", "tiny:1", "tiny:2"]
    html = folder.report.read_text()
    assert "DRY RUN" in html and "<svg" in html and "tiny:2" in html


def test_second_run_is_served_from_the_cache_with_identical_scores(tmp_path, cache_dir):
    first = run_recipe(recipe(tmp_path), progress=False)
    second = run_recipe(recipe(tmp_path), progress=False)
    assert first.path != second.path
    assert all(e["cache_hit"] for e in lines(second.ledger))
    scores = lambda f: {r["key"]: r["scores"] for r in lines(f.results)}
    assert scores(first) == scores(second)


def test_a_killed_run_resumes_without_losing_or_doubling(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path), progress=False)
    complete = lines(folder.results)
    kept = folder.results.read_text().splitlines()[:2]
    folder.results.write_text("\n".join(kept) + "\n" + kept[0][:40])  # two results and a torn line
    folder.ledger.unlink()

    resumed = run_recipe(recipe(tmp_path), folder.path, progress=False)
    assert resumed.path == folder.path
    after = lines(resumed.results)
    assert sorted(r["key"] for r in after) == sorted(r["key"] for r in complete)  # each key exactly once
    assert {r["key"]: r["scores"] for r in after} == {r["key"]: r["scores"] for r in complete}
    assert json.loads(resumed.config.read_text())["run_id"] == folder.path.name
    answered = {e["case_id"] + "::" + e["system"] for e in lines(resumed.ledger) if e["node"] == "direct"}
    assert answered == {r["key"] for r in complete} - {json.loads(k)["key"] for k in kept}


def test_failures_are_recorded_with_their_reason(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path, model="scripted?error_rate=1"), progress=False)
    results = lines(folder.results)
    assert len(results) == 6 and all(r["status"] == "error" for r in results)
    assert all("ModelCallError" in r["error"] and "after 2 attempts" in r["error"] for r in results)
    summary = json.loads(folder.summary.read_text())
    assert (
        summary["systems"]["full"]["errors"] == 3 and summary["systems"]["full"]["judges"]["lampqa_aspects"]["n"] == 0
    )


def test_a_resumed_run_redoes_failed_episodes_and_the_last_line_wins(tmp_path, cache_dir, monkeypatch):
    from atelier.graphs import direct as direct_module

    async def broken(*args, **kwargs):
        raise RuntimeError("the writer fell over")

    monkeypatch.setattr(direct_module, "answer", broken)
    folder = run_recipe(recipe(tmp_path), progress=False)
    assert {r["error"] for r in lines(folder.results)} == {"RuntimeError: the writer fell over"}
    monkeypatch.undo()
    run_recipe(recipe(tmp_path), folder.path, progress=False)
    assert len(lines(folder.results)) == 12  # six failures, then six successes appended
    latest = ResultsFile(folder.results).load()
    assert len(latest) == 6 and all(r.ok for r in latest.values())
    assert json.loads(folder.summary.read_text())["systems"]["full"]["errors"] == 0


def test_systems_never_see_gold(tmp_path, cache_dir, monkeypatch):
    seen: dict[str, list[str]] = {"system": [], "judge": []}
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        seen[role].append(json.dumps(messages))
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    runner = Runner(recipe(tmp_path), progress=False)
    import asyncio

    asyncio.run(runner.run())
    assert len(seen["system"]) == 6 and not any(GOLD_SENTINEL in m for m in seen["system"])
    assert all(GOLD_SENTINEL in m for m in seen["judge"])  # judges do see the rubric


def test_a_web_provider_without_its_key_stops_the_run_before_any_episode(tmp_path, cache_dir, monkeypatch):
    from atelier.benchmarks.common.errors import ConfigError

    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    data = recipe(tmp_path).model_dump(mode="python")
    data["web"] = {"provider": "serper"}
    with pytest.raises(ConfigError, match="SERPER_API_KEY"):
        run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "results.jsonl").exists()


async def test_the_runs_web_is_shared_recorded_in_the_run_folder_and_logged(tmp_path):
    from atelier.graphs.context import EpisodeContext, SystemSpec
    from atelier.graphs.resources import release, resources_for
    from atelier.tools.config import WebConfig

    web = WebConfig(cache_dir=tmp_path / "run" / "web")
    contexts = [
        EpisodeContext(run_id="r", run_dir=str(tmp_path / "run"), system=SystemSpec(name=n), web=web)
        for n in ("a", "b")
    ]
    first, second = (resources_for(c).web() for c in contexts)
    assert first is second  # one sandbox and one web cache per run
    results = await first.search("Lisbon Porto train fares")
    assert results and results[0].url.startswith("https://")
    for context in contexts:
        await release(context)
    log = lines(tmp_path / "run" / "web_log.jsonl")
    assert [entry["kind"] for entry in log] == ["search"]
    assert any((tmp_path / "run" / "web").rglob("*"))  # recorded for replay


def test_a_run_folder_only_resumes_the_recipe_that_made_it(tmp_path, cache_dir):
    from atelier.benchmarks.common.errors import ConfigError

    folder = run_recipe(recipe(tmp_path), progress=False)
    changed = recipe(tmp_path, model="scripted?seed=9")
    with pytest.raises(ConfigError, match=r"different recipe \(models.system changed\)"):
        run_recipe(changed, folder.path, progress=False)
    data = recipe(tmp_path).model_dump(mode="python")
    data["systems"][1]["memory"]["budget_tokens"] = 99
    data["seed"] = 5
    with pytest.raises(ConfigError, match=r"different recipe \(seed, systems changed\)"):
        run_recipe(parse_recipe(data), folder.path, progress=False)
    more = recipe(tmp_path).with_overrides(limit=2)  # a different limit is still the same run
    run_recipe(more, folder.path, progress=False)


def system_calls(folder) -> int:
    return sum(e["role"] == "system" for e in lines(folder.ledger))


def test_settings_that_change_no_answer_may_change_on_resume(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path), progress=False)
    before, results = system_calls(folder), folder.results.read_text()
    # the scripted model's latency and fault injection, retries and concurrency decide no answer
    run_recipe(
        recipe(tmp_path, model="scripted?latency_ms=1&error_rate=0.01", concurrency=1), folder.path, progress=False
    )
    assert system_calls(folder) == before and folder.results.read_text() == results


def test_a_changed_judge_model_rejudges_every_stored_response_without_running_systems(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path), progress=False)
    before = system_calls(folder)
    judged = {r["key"]: r["judgments"] for r in lines(folder.results)}
    data = recipe(tmp_path).model_dump(mode="python")
    data["models"]["judge"] = {"model": "scripted?seed=7"}
    run_recipe(parse_recipe(data), folder.path, progress=False)
    assert system_calls(folder) == before
    latest = ResultsFile(folder.results).load()
    assert len(latest) == 6 and all(r.ok and r.judgments[0].error is None for r in latest.values())
    assert {k: [j.model_dump() for j in r.judgments] for k, r in latest.items()} != judged  # another judge's view
    assert sum(e["role"] == "lampqa_judge" for e in lines(folder.ledger)) == 2 * 12


def test_failed_judgments_are_redone_on_resume_and_no_system_call_is_repeated(tmp_path, cache_dir):
    def with_judge(model: str):
        data = recipe(tmp_path).model_dump(mode="python")
        data["models"]["judge"] = {"model": model, "max_retries": 0}
        return parse_recipe(data)

    folder = run_recipe(with_judge("scripted?error_rate=0.5"), progress=False)
    first = ResultsFile(folder.results).load()
    failed = [r for r in first.values() if r.judgments[0].error]
    assert all(r.ok for r in first.values()) and 0 < len(failed) < 6  # the systems answered; some judgments failed
    summary = json.loads(folder.summary.read_text())
    assert sum(s["judges"]["lampqa_aspects"]["failed"] for s in summary["systems"].values()) == len(failed)
    answered = [(e["case_id"], e["system"]) for e in lines(folder.ledger) if e["role"] == "system"]

    run_recipe(with_judge("scripted"), folder.path, progress=False)  # resumed with a healthy judge
    latest = ResultsFile(folder.results).load()
    assert all(
        r.ok and r.judgments[0].error is None and r.scores["lampqa_aspects"] is not None for r in latest.values()
    )
    assert {k: r.response for k, r in latest.items()} == {k: r.response for k, r in first.items()}
    assert [(e["case_id"], e["system"]) for e in lines(folder.ledger) if e["role"] == "system"] == answered
    rejudged = {(e["case_id"], e["system"]) for e in lines(folder.ledger) if e["node"] == "judge_again"}
    assert rejudged >= {(r.case_id, r.system) for r in failed}
    judge_nodes = {e["node"] for e in lines(folder.ledger) if e["role"] == "lampqa_judge"}
    assert judge_nodes == {"run_judge", "judge_again"}  # in the episode, then on resume
    summary = json.loads(folder.summary.read_text())
    assert all(
        s["judges"]["lampqa_aspects"] == {**s["judges"]["lampqa_aspects"], "n": 3, "failed": 0}
        for s in summary["systems"].values()
    )


def test_the_summary_does_not_depend_on_the_order_of_result_lines(tmp_path, cache_dir):
    import random

    data = recipe(tmp_path).model_dump(mode="python")
    data["benchmark"] = {"name": "sample", "setting": "context", "limit": 12}
    sample = parse_recipe(data)
    folder = run_recipe(sample, progress=False)
    summary = folder.summary.read_bytes()
    results = folder.results.read_text().splitlines()
    for seed in (1, 2):
        random.Random(seed).shuffle(results)
        folder.results.write_text("\n".join(results) + "\n")
        run_recipe(sample, folder.path, progress=False)  # resumes: nothing left to run
        assert folder.summary.read_bytes() == summary
