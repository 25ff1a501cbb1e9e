"""Honest numbers (issue 30): every degraded step is recorded, reaches summary, report, closing lines,
`compare` and the exit code; no role is silently scripted; a replay miss fails its episode; numbers
with nothing measured read "not measured"; rescore takes any judge; the pairwise baseline is no
unjudged episode."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from atelier.agents.judges.base import JudgeResult
from atelier.agents.planner import checked_queries
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.degradation import Degradation, counts_by_kind, degradation
from atelier.benchmarks.common.errors import ConfigError
from atelier.memory.budget import pack
from atelier.runs.cli import app
from atelier.runs.execution.runner import Runner, run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultRecord, result_key
from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK, outcome_of
from tests.test_cli_errors import atelier, one_error_line
from tests.test_report import render, table


def record(
    case: str, system: str, *, system_degraded=(), judge_degraded=(), score=0.5, error=None, judge="j"
) -> ResultRecord:
    judgment = JudgeResult(judge=judge, score=None if error else score, error=error, degraded=list(judge_degraded))
    return ResultRecord(
        key=result_key(case, system),
        run_id="r",
        case_id=case,
        system=system,
        benchmark="b",
        user_id="u",
        setting="s",
        status="ok",
        response=SystemResponse(text="x", degraded=list(system_degraded)),
        judgments=[judgment],
        scores={judge: judgment.score},
    )


# ----------------------------------------------------------------------------- the record and the exit code


def test_a_degraded_episode_fails_the_exit_code_unless_its_kind_is_tolerated():
    cut = degradation("memory_budget_cut", "recall", "3 of 9 history events left out", count=3)
    gated = degradation("judge_output_gated", "judge:j", "feedback ','")
    records = [record("c1", "s", system_degraded=[cut]), record("c2", "s", judge_degraded=[gated]), record("c3", "s")]
    keys = [r.key for r in records]

    strict = outcome_of(records, keys, ["j"])
    assert strict.scored == 3 and strict.degraded_episodes == 2
    assert dict(strict.degraded) == {"memory_budget_cut": 3, "judge_output_gated": 1}
    assert strict.exit_code == EXIT_FAILURES
    assert strict.degraded_cases == {"memory_budget_cut": ["c1::s"], "judge_output_gated": ["c2::s"]}
    assert "degraded: 2 episodes (by kind: judge_output_gated 1, memory_budget_cut 3)" in strict.lines()

    lenient = outcome_of(records, keys, ["j"], tolerate=["memory_budget_cut", "judge_output_gated"])
    assert lenient.exit_code == EXIT_OK
    assert lenient.degraded_episodes == 2  # still reported
    assert any("memory_budget_cut 3 (tolerated)" in line for line in lenient.lines())
    half = outcome_of(records, keys, ["j"], tolerate=["memory_budget_cut"])
    assert half.exit_code == EXIT_FAILURES and half.failing_degradations == {"judge_output_gated": 1}


def test_the_record_gathers_memory_system_and_judge_degradations():
    from atelier.runs.folder.results import ContextUsed

    cut = degradation("memory_budget_cut", "recall", count=2)
    fell = degradation("step_fallback", "plan", "one sub-topic")
    gated = degradation("spans_removed", "judge:aepd", count=4)
    r = record("c", "s", system_degraded=[fell], judge_degraded=[gated])
    r = r.model_copy(update={"user_context": ContextUsed(backend="full", form="raw", degraded=[cut])})
    assert r.system_degraded == [cut, fell]
    assert r.degraded == [cut, fell, gated]
    line = json.loads(r.model_dump_json())
    assert [d["kind"] for d in line["degraded"]] == ["memory_budget_cut", "step_fallback", "spans_removed"]
    assert ResultRecord.model_validate(line).degraded == r.degraded  # the derived list reads back the same


def test_undefined_scores_are_counted_apart_from_failures_and_do_not_fail_the_run():
    undefined = record("c1", "s", score=None)
    failed = record("c2", "s", error="judge model out of retries")
    outcome = outcome_of([undefined, failed], [undefined.key, failed.key], ["j"])
    assert (outcome.scored, outcome.unscored, outcome.undefined) == (1, 1, 1)
    only_undefined = outcome_of([undefined], [undefined.key], ["j"])
    assert only_undefined.exit_code == EXIT_OK and only_undefined.undefined == 1


def test_the_pairwise_baseline_is_not_counted_as_unjudged():
    base = record("c", "base", judge="pairwise")
    base = base.model_copy(update={"judgments": [], "scores": {}})  # the baseline is compared against, never judged
    other = record("c", "other", judge="pairwise")
    keys = [base.key, other.key]
    assert outcome_of([base, other], keys, ["pairwise"]).exit_code == EXIT_FAILURES  # the old tally
    fair = outcome_of([base, other], keys, ["pairwise"], baselines={"pairwise": "base"})
    assert (fair.scored, fair.unscored, fair.exit_code) == (2, 0, EXIT_OK)


def test_unknown_degradation_kinds_are_refused_in_a_recipe():
    data = {
        "name": "t",
        "benchmark": {"name": "tiny"},
        "systems": [{"name": "a", "memory": {"backend": "none"}}],
        "run": {"tolerate": ["memory_budget_cutt"]},
    }
    with pytest.raises(ConfigError, match="memory_budget_cutt.*valid: step_fallback"):
        parse_recipe(data)
    data["run"]["tolerate"] = ["memory_budget_cut"]
    assert parse_recipe(data).run.tolerate == ["memory_budget_cut"]


# ----------------------------------------------------------------------------- where degradations come from


def test_checked_queries_replace_urls_blanks_and_repeats_and_say_so():
    kept, problems = checked_queries(
        ["https://example.com/a", "  ", "emergency fund size", "Emergency  fund size", "bbc.co.uk", "example.org/page"],
        "the question",
        "retrieve",
    )
    assert kept == ["emergency fund size"]
    assert [p.kind for p in problems] == ["invalid_query"] * 5
    assert "a URL" in problems[0].detail and "empty" in problems[1].detail and "a repeat" in problems[2].detail

    kept, problems = checked_queries(["www.x.com"], "the question", "search")
    assert kept == ["the question"]
    assert [p.kind for p in problems] == ["invalid_query", "empty_answer"]
    assert "searched 'the question' instead" in problems[1].detail

    kept, problems = checked_queries(
        ["node.js event loop", "Python 3.12 release"], "q", "search", seen=["python 3.12 release"]
    )
    assert kept == ["node.js event loop"] and problems[0].detail.endswith("is a repeat")


def test_a_budget_that_cuts_history_says_how_much():
    items = [(f"e{i}", "word " * 40) for i in range(5)]
    packed = pack(items, budget=100)
    assert 0 < len(packed.ids) < 5 and packed.cut == 5 - len(packed.ids) and packed.offered == 5
    [cut] = packed.degraded("recall", "history events", 100)
    assert cut.kind == "memory_budget_cut" and cut.count == packed.cut
    assert cut.detail == f"{packed.cut} of 5 history events left out by the 100-token budget"
    assert pack(items, budget=10_000).degraded("recall", "history events", 10_000) == []


def test_counts_by_kind_sums_counts():
    items = [
        Degradation(kind="fetch_failed", step="read", count=2),
        Degradation(kind="fetch_failed", step="read"),
        Degradation(kind="citation_removed", step="answer", count=3),
    ]
    assert counts_by_kind(items) == {"citation_removed": 3, "fetch_failed": 3}


# ----------------------------------------------------------------------------- runs end to end


def rag_recipe(tmp_path, web: dict, name="rag", **extra):
    return parse_recipe(
        {
            "name": name,
            "benchmark": {"name": "tiny", "limit": 2},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [{"name": "rag", "pipeline": "rag", "memory": {"backend": "none"}}],
            "judges": [{"name": "lampqa_aspects"}],
            "web": web,
            "run": {"out_dir": str(tmp_path / "out"), **extra},
        }
    )


def test_a_run_whose_web_failed_in_every_episode_exits_3_with_counts_by_kind(tmp_path, cache_dir):
    # a search engine that is not there: every search fails, and so does the run
    web = {
        "provider": "searxng",
        "provider_options": {"base_url": "http://127.0.0.1:9"},
        "allow_hosts": ["127.0.0.1:9"],
        "mode": "live",
    }
    runner = Runner(rag_recipe(tmp_path, web), tmp_path / "run", progress=False, preflight=False)
    import asyncio

    folder = asyncio.run(runner.run())
    assert runner.outcome.exit_code == EXIT_FAILURES
    assert runner.outcome.scored == 2 and runner.outcome.degraded["search_failed"] >= 2
    summary = json.loads(folder.summary.read_text())
    assert summary["systems"]["rag"]["degraded"]["search_failed"] >= 2
    assert summary["systems"]["rag"]["degraded_episodes"] == 2
    assert summary["systems"]["rag"]["judges"]["lampqa_aspects"]["n_degraded"] == 2  # shown, and marked
    kinds = {d["kind"]: d for d in summary["episodes"]["degraded"]}
    assert kinds["search_failed"]["episodes"] == ["tiny:0::rag", "tiny:1::rag"]
    lines = [json.loads(line) for line in folder.results.read_text().splitlines()]
    assert all(any(d["kind"] == "search_failed" for d in line["response"]["degraded"]) for line in lines)


def test_a_replay_over_an_empty_record_fails_its_episodes_naming_the_miss(tmp_path, cache_dir, capsys, monkeypatch):
    empty = tmp_path / "empty-web"
    empty.mkdir()
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        write_recipe(tmp_path, {"mode": "replay", "cache_dir": str(empty)}),
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    )
    assert code == EXIT_FAILURES, err
    assert "ReplayMiss" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    reasons = summary["episodes"]["failure_reasons"]
    assert summary["episodes"]["failed"] == 2 and "ReplayMiss: replay: no recorded search" in reasons[0]["reason"]


def test_a_replayed_run_keeps_its_own_complete_web_record(tmp_path, cache_dir):
    first = run_recipe(rag_recipe(tmp_path, {}), tmp_path / "first", progress=False)
    replay = rag_recipe(tmp_path, {"mode": "replay", "cache_dir": str(first.path / "web")})
    second = run_recipe(replay, tmp_path / "second", progress=False)
    own = sorted(p.name for p in (second.path / "web" / "records").glob("*/*.json"))
    assert own and own == sorted(p.name for p in (first.path / "web" / "records").glob("*/*.json"))
    # ... so the replay can itself be replayed, and gives the same answers
    third = run_recipe(
        rag_recipe(tmp_path, {"mode": "replay", "cache_dir": str(second.path / "web")}),
        tmp_path / "third",
        progress=False,
    )
    texts = [
        {json.loads(line)["key"]: json.loads(line)["response"]["text"] for line in f.results.read_text().splitlines()}
        for f in (second, third)
    ]
    assert texts[0] == texts[1]


def write_recipe(tmp_path, web: dict, models: str | None = None) -> str:
    web_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in web.items())
    path = tmp_path / "recipe.toml"
    models = models or '[models.system]\nmodel = "scripted"\n[models.judge]\nmodel = "scripted"'
    path.write_text(f"""name = "t"
[benchmark]
name = "tiny"
limit = 2
{models}
[[systems]]
name = "rag"
pipeline = "rag"
memory = {{ backend = "none" }}
[[judges]]
name = "lampqa_aspects"
[web]
{web_lines}""")
    return str(path)


def test_a_real_system_model_with_an_unset_judge_is_refused_naming_the_role(tmp_path, capsys, monkeypatch):
    path = write_recipe(
        tmp_path, {}, models='[models.system]\nmodel = "openai/gpt-4o-mini"\napi_key_env = "NO_SUCH_KEY"'
    )
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", path)
    line = one_error_line(err)
    assert code == 2
    assert "[models.judge] not set" in line and "openai/gpt-4o-mini" in line
    named = write_recipe(
        tmp_path, {}, models='[models.system]\nmodel = "openai/gpt-4o-mini"\n[models.judge]\nmodel = "scripted"'
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # recipe check refuses a real model without its key
    code, out, err = atelier(capsys, monkeypatch, "recipe", "check", named)
    assert code == 0 and out.startswith("ok: "), err  # scripted mixed in on purpose: named, so allowed


def test_a_real_model_on_every_role_from_the_command_line_is_not_refused(tmp_path):
    path = write_recipe(tmp_path, {}, models='[models.system]\nmodel = "openai/gpt-4o-mini"')
    from atelier.runs.folder.recipe import load_recipe

    with pytest.raises(ConfigError, match=r"\[models\.judge\] not set"):
        load_recipe(path).check_roles_named()
    load_recipe(path).with_overrides(model="openai/gpt-4o").check_roles_named()
    user_sim = parse_recipe(
        {
            "name": "t",
            "benchmark": {"name": "tiny"},
            "user_sim": {"clarify": True},
            "models": {"system": {"model": "openai/x"}, "judge": {"model": "openai/x"}},
            "systems": [{"name": "a", "pipeline": "deep_research", "memory": {"backend": "none"}}],
        }
    )
    with pytest.raises(ConfigError, match=r"\[models\.user_sim\] not set"):
        user_sim.check_roles_named()


def test_dry_run_is_true_exactly_when_a_call_was_scripted(tmp_path, cache_dir):
    from tests.openai_stub import OpenAIStub

    scripted = run_recipe(rag_recipe(tmp_path, {}), tmp_path / "scripted", progress=False)
    assert json.loads(scripted.summary.read_text())["dry_run"] is True
    with OpenAIStub() as stub:
        real = {"model": "openai/stub-model", "api_base": stub.base_url, "api_key": "sk-stub", "max_retries": 0}
        data = rag_recipe(tmp_path, {}).model_dump(mode="python")
        data["models"] = {"system": real, "judge": real}
        folder = run_recipe(parse_recipe(data), tmp_path / "real", progress=False)
    summary = json.loads(folder.summary.read_text())
    assert summary["dry_run"] is False and summary["ledger"]["provider_calls"] > 0
    assert not any(json.loads(line)["dry_run"] for line in folder.results.read_text().splitlines())
    # no banner says so (the raw JSON a case holds may quote the stub, which answers as the scripted model does)
    assert "banner dry" not in folder.report.read_text()


def test_paper_numbers_with_nothing_measured_read_not_measured_and_fail_the_run(tmp_path, cache_dir):
    data = rag_recipe(tmp_path, {}).model_dump(mode="python")
    # a criterion the judge does not report: no case can measure it
    data["report"] = {
        "paper": [{"row": "their system", "system": "rag", "judge": "lampqa_aspects", "values": {"GOAL": 7.5}}]
    }
    runner = Runner(parse_recipe(data), tmp_path / "run", progress=False, preflight=False)
    import asyncio

    folder = asyncio.run(runner.run())
    summary = json.loads(folder.summary.read_text())
    assert summary["paper"][0]["n"] == 0 and summary["paper"][0]["ours"] is None
    assert summary["episodes"]["unmeasured"] == ["their system / GOAL"]
    assert "not measured" in folder.report.read_text()
    assert runner.outcome.exit_code == EXIT_FAILURES
    assert any(line.startswith("not measured (n = 0): 1 paper-table number") for line in runner.outcome.lines())


def test_rescore_takes_any_judge_on_a_paper_recipe_run(tmp_path, cache_dir):
    data = rag_recipe(tmp_path, {}).model_dump(mode="python")
    data["report"] = {
        "paper": [{"row": "theirs", "system": "rag", "judge": "lampqa_aspects", "values": {"score": 0.5}}]
    }
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    result = CliRunner().invoke(
        app,
        [
            "rescore",
            str(folder.path),
            "--judge",
            "lampqa_direct",
            "--model",
            "scripted",
            "--out",
            str(tmp_path / "rescore"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "rescore" / "config.json").read_text())
    assert config["rescore_of"]["paper_rows_left_out"][0]["row"] == "theirs"
    assert (
        "1 paper row of the original left out of the rescore: its judge is not rescored (lampqa_aspects)"
        in result.output
    )
    summary = json.loads((tmp_path / "rescore" / "summary.json").read_text())
    assert summary["systems"]["rag"]["judges"]["lampqa_direct"]["n"] == 2


def test_compare_shows_what_degraded_beside_the_scores(tmp_path, cache_dir):
    good = run_recipe(rag_recipe(tmp_path, {}), tmp_path / "good", progress=False)
    web = {
        "provider": "searxng",
        "provider_options": {"base_url": "http://127.0.0.1:9"},
        "allow_hosts": ["127.0.0.1:9"],
        "mode": "live",
    }
    import asyncio

    bad = asyncio.run(
        Runner(rag_recipe(tmp_path, web, name="noweb"), tmp_path / "bad", progress=False, preflight=False).run()
    )
    result = CliRunner().invoke(app, ["compare", str(good.path), str(bad.path), "--html", str(tmp_path / "c.html")])
    assert result.exit_code == EXIT_FAILURES, result.output  # as `run` exits on the degraded run (issue 41)
    assert "search_failed" in result.output
    html = (tmp_path / "c.html").read_text()
    assert "2 episodes: " in html and "search_failed" in html


def test_the_report_panel_counts_what_results_jsonl_holds(tmp_path, cache_dir):
    """Chromium renders the "what went wrong" panel: one row per kind, its count the sum over the
    result lines, and each listed episode links to a cell that exists on the page."""
    data = rag_recipe(tmp_path, {}).model_dump(mode="python")
    data["systems"].append(
        {"name": "full-tight", "pipeline": "direct", "memory": {"backend": "full", "budget_tokens": 12}}
    )
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    expected: dict[str, int] = {}
    for line in folder.results.read_text().splitlines():
        for d in json.loads(line)["degraded"]:
            expected[d["kind"]] = expected.get(d["kind"], 0) + d["count"]
    assert expected.get("memory_budget_cut", 0) > 0
    doc = render(folder.report, screenshot=tmp_path / "report.png")
    rows = doc.xpath('//table[@id="degraded"]//tr[@data-kind]')
    shown = {row.get("data-kind"): int(row.get("data-count")) for row in rows}
    assert shown == expected
    cells = {row[0]: row for row in table(doc, "degraded")}
    for row in rows:
        for link in row.xpath(".//a"):
            target = link.get("href").lstrip("#")
            assert doc.xpath(f'//*[@id="{target}"]'), target
            assert doc.xpath(f'//*[@id="{target}"]//details[contains(@class, "degraded-steps")]')
    assert cells and "memory_budget_cut" in " ".join(cells)
    assert doc.xpath('//*[@id="outcome" and contains(@class, "warn")]')
