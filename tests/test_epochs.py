"""Epochs (issue 35, item 1): `[run] epochs = k` runs each (case, system) k times with seeds of its
own, keys each run by its epoch, resumes exactly (kill -9 included), and summarizes over cases,
each case's score its mean over epochs, with the spread between epochs."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections import Counter

import pytest
from scipy import stats

from atelier.agents.judges.base import JudgeResult
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.metrics.statistics import epoch_spread
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.runs.execution.preflight import epoch_problems
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.epochs import epoch_context, epoch_of
from atelier.runs.folder.layout import expected_keys
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile, result_key
from atelier.runs.reading.summary import epoch_means, summarize
from tests.test_cli_errors import atelier
from tests.test_run_signals import SLOW_MODEL, lines, start, wait_for_results

QUICKSTART = "runs/recipes/quickstart.toml"


def record(case: str, system: str, epoch: int, score: float | None, status: str = "ok") -> ResultRecord:
    return ResultRecord(
        key=result_key(case, system, epoch),
        run_id="r",
        case_id=case,
        system=system,
        benchmark="sample",
        user_id="u",
        setting="context",
        epoch=epoch,
        status=status,
        scores={"j": score} if status == "ok" else {},
    )


def line(case: str, system: str, epoch: int, score: float) -> dict:
    """`record` as a run writes it to results.jsonl: its scores its judgments' (read back against them)."""
    written = record(case, system, epoch, score).with_judgments([JudgeResult(judge="j", score=score)])
    return written.model_dump(mode="json")


# ----------------------------------------------------------------------------- keys and records


def test_the_first_epoch_keeps_the_key_runs_always_had_and_later_ones_name_their_epoch():
    assert result_key("q1", "a") == result_key("q1", "a", 1) == "q1::a"
    assert result_key("q1", "a", 3) == "q1::a::epoch3"
    assert expected_keys(["q1", "q2"], ["a"], 2) == ["q1::a", "q2::a", "q1::a::epoch2", "q2::a::epoch2"]
    assert expected_keys(["q1"], ["a", "b"]) == ["q1::a", "q1::b"]


def test_a_line_from_before_epochs_reads_as_the_first_epoch(tmp_path):
    path = tmp_path / "results.jsonl"
    old = line("q1", "a", 1, 0.5)
    del old["epoch"], old["cost_usd"]
    path.write_text(json.dumps(old) + "\n")
    assert ResultsFile(path).load()["q1::a"].epoch == 1


def test_a_key_that_is_not_its_epoch_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "results.jsonl"
    wrong = line("q1", "a", 2, 0.5) | {"key": "q1::a"}  # epoch 2 under epoch 1's key
    path.write_text(json.dumps(line("q1", "a", 1, 0.5)) + "\n" + json.dumps(wrong) + "\n")
    with pytest.raises(DataError) as refused:
        ResultsFile(path).load()
    assert refused.value.line == 2 and "q1::a::epoch2" in str(refused.value)


# ----------------------------------------------------------------------------- seeds


def test_a_later_epoch_moves_the_system_sides_seeds_and_the_judges():
    context = EpisodeContext(
        run_id="r",
        models={
            "system": ModelSettings(model="scripted", seed=5),
            "judge": ModelSettings(model="scripted", seed=5),
            "user_sim": ModelSettings(model="scripted", seed=None),
        },
        system=SystemSpec(name="a", models={"writer": ModelSettings(model="scripted", seed=1)}),
        seed=7,
    )
    spec = context.system
    assert epoch_context(context, 1) is context and epoch_of(context, spec) == 1
    third = epoch_context(context, 3)
    roles = third.role_models()
    assert roles["system"].seed == 7 and roles["writer"].seed == 3 and roles["user_sim"].seed == 2
    assert roles["judge"].seed == 45 and third.seed == 9  # judges move by 20 an epoch (issue 50); the run's too
    assert third.system.name == "a@epoch3" and epoch_of(third, spec) == 3  # its own memory folder
    assert context.role_models()["system"].seed == 5  # the first epoch's context is untouched


def test_epochs_are_accepted_on_ray():  # each epoch's record and checkpoint thread is keyed by epoch there too
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["run"] |= {"epochs": 2, "executor": "ray"}
    assert parse_recipe(data).run.epochs == 2


def test_a_comparative_judge_pairs_responses_epoch_by_epoch(tmp_path, cache_dir):
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["judges"] = [{"name": "lampqa_aspects"}, {"name": "lampqa_pairwise", "baseline": "direct-none"}]
    data["run"]["epochs"] = 2
    data["benchmark"]["limit"] = 2
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    records = {}
    for line in (folder.path / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["key"]] = record  # the last line of a key wins
    assert len(records) == 8
    compared = [r for r in records.values() if r["system"] == "direct-full"]
    assert sorted(r["epoch"] for r in compared) == [1, 1, 2, 2]
    for record in compared:  # judged once per epoch, against the baseline's response of that epoch
        pairwise = [j for j in record["judgments"] if j["judge"] == "lampqa_pairwise"]
        assert len(pairwise) == 1 and not pairwise[0].get("failed"), record["key"]
    from atelier.runs.execution.judging import comparisons_due
    from atelier.runs.folder.results import ResultRecord

    loaded = {k: ResultRecord.model_validate(v) for k, v in records.items()}
    baseline_e2 = next(r for r in loaded.values() if r.system == "direct-none" and r.epoch == 2)
    del loaded[baseline_e2.key]  # with epoch 2's baseline gone, epoch 2 of that case has nobody to face
    undone = {
        k: r.model_copy(update={"judgments": [j for j in r.judgments if j.judge != "lampqa_pairwise"]})
        for k, r in loaded.items()
    }

    class Pairwise:
        key, baseline = "lampqa_pairwise", "direct-none"

    due = comparisons_due(undone, Pairwise())  # type: ignore[arg-type]
    assert {(r.case_id, r.epoch) for r, _ in due} == {
        (r.case_id, r.epoch) for r in loaded.values() if r.system == "direct-full"
    } - {(baseline_e2.case_id, 2)}
    assert all(r.epoch == b.epoch and r.case_id == b.case_id for r, b in due)
    summary = json.loads((folder.path / "summary.json").read_text())
    assert summary["systems"]["direct-full"]["judges"]["lampqa_pairwise"]["n"] == 2  # per case, over epochs


@pytest.mark.parametrize(
    ("epochs", "system", "refused"),
    [
        (3, {"model": "openai/gpt-4o-mini"}, True),  # a real model at temperature 0: one answer three times
        (3, {"model": "openai/gpt-4o-mini", "temperature": 0.7}, False),
        (3, {"model": "scripted"}, False),  # the scripted model follows the seed at any temperature
        (1, {"model": "openai/gpt-4o-mini"}, False),
    ],
)
def test_preflight_refuses_epochs_of_a_real_model_at_temperature_0(epochs, system, refused):
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["models"] = {"system": system, "judge": {"model": "openai/gpt-4o-mini"}}  # a judge at 0 is fine
    data["run"]["epochs"] = epochs
    problems = epoch_problems(parse_recipe(data))
    if refused:
        assert problems == [
            "models.system (openai/gpt-4o-mini) answers at temperature 0, so the 3 epochs would repeat one answer "
            "instead of measuring the system's spread: set its temperature > 0 (e.g. 0.7), or epochs = 1"
        ]
    else:
        assert problems == []


def test_a_failed_preflight_of_epochs_is_one_error_and_exit_2(tmp_path, capsys, monkeypatch, cache_dir):
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        QUICKSTART,
        "--model",
        "openai/gpt-4o-mini",
        "--api-base",
        "http://127.0.0.1:9/v1",
        "--epochs",
        "2",
        "--out",
        str(tmp_path / "run"),
    )
    assert code == 2 and "Traceback" not in err
    assert "answers at temperature 0, so the 2 epochs would repeat one answer" in err


# ----------------------------------------------------------------------------- statistics


def test_the_spread_between_epochs_by_hand():
    spread = epoch_spread({"a": {1: 0.2, 2: 0.4}, "b": {1: 0.6, 2: 0.6}, "c": {1: 1.0}}, epochs=3)
    assert spread.n_scores == 5 and spread.n_cases_repeated == 2
    assert spread.mean_case_std == pytest.approx((math.sqrt(0.02) + 0.0) / 2)  # std of (0.2, 0.4), ddof 1
    assert spread.epoch_means[0] == pytest.approx(0.6) and spread.epoch_means[1] == pytest.approx(0.5)
    assert spread.epoch_means[2] is None
    assert spread.epoch_means_std == pytest.approx(math.sqrt(0.005))


def test_the_summary_rests_on_per_case_means_over_epochs():
    records = [
        record("q1", "a", 1, 0.0),
        record("q1", "a", 2, 1.0),
        record("q2", "a", 1, 0.4),
        record("q2", "a", 2, 0.4),
        record("q3", "a", 1, 0.9),
        record("q3", "a", 2, None, status="error"),  # a failed epoch: the case rests on the other
        record("q1", "b", 1, 0.1),
        record("q1", "b", 2, 0.1),
        record("q2", "b", 1, 0.2),
        record("q2", "b", 2, 0.2),
        record("q3", "b", 1, 0.3),
        record("q3", "b", 2, 0.3),
    ]
    summary = summarize(records, ["a", "b"], ["j"], epochs=2)
    a = summary["systems"]["a"]["judges"]["j"]
    assert summary["epochs"] == 2 and summary["systems"]["a"]["n"] == 5 and summary["systems"]["a"]["errors"] == 1
    assert a["n"] == 3 and a["case_means"] == {"q1": 0.5, "q2": 0.4, "q3": 0.9}
    assert a["mean"] == pytest.approx(0.6)  # over cases, not over the 5 scores (0.54)
    assert a["epoch_spread"]["n_cases_repeated"] == 2
    assert a["epoch_spread"]["mean_case_std"] == pytest.approx(math.sqrt(0.5) / 2)
    assert a["epoch_spread"]["epoch_means"] == pytest.approx([(0.0 + 0.4 + 0.9) / 3, (1.0 + 0.4) / 2])
    assert summary["systems"]["b"]["judges"]["j"]["epoch_spread"]["mean_case_std"] == 0.0
    [test] = summary["comparisons"]
    assert test["n"] == 3 and test["mean_a"] == pytest.approx(0.6) and test["mean_b"] == pytest.approx(0.2)
    # the interval rests on the three case means: Student's t on them
    low, high = a["ci95"]
    theirs = stats.ttest_1samp([0.5, 0.4, 0.9], 0.0).confidence_interval(0.95)
    assert (low, high) == pytest.approx((theirs.low, theirs.high))
    paired = {(r.case_id, r.system): r.scores["j"] for r in epoch_means(records)}
    assert paired[("q1", "a")] == 0.5 and paired[("q3", "a")] == 0.9 and len(paired) == 6


def test_one_epoch_summaries_are_as_they_were():
    records = [record("q1", "a", 1, 0.2), record("q2", "a", 1, 0.4)]
    judge = summarize(records, ["a"], ["j"])["systems"]["a"]["judges"]["j"]
    assert "epoch_spread" not in judge and "case_means" not in judge and judge["mean"] == pytest.approx(0.3)


# ----------------------------------------------------------------------------- runs


def test_a_run_of_one_epoch_resumed_with_two_keeps_its_first(tmp_path, cache_dir):
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["benchmark"]["limit"] = 1
    first = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    before = {r["key"]: r for r in lines(first.results)}
    assert sorted(before) == ["q13::direct-full", "q13::direct-none"] and all(r["epoch"] == 1 for r in before.values())
    data["run"]["epochs"] = 2
    again = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    after = lines(again.results)
    assert [r["key"] for r in after[:2]] == list(before)  # the first epoch was not run again
    assert sorted(r["key"] for r in after[2:]) == ["q13::direct-full::epoch2", "q13::direct-none::epoch2"]
    assert json.loads(again.summary.read_text())["episodes"]["expected"] == 4


def run_args(out, epochs: int = 3) -> list[str]:
    return [
        "run",
        QUICKSTART,
        "--model",
        SLOW_MODEL,
        "--limit",
        "2",
        "--epochs",
        str(epochs),
        "--concurrency",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]


@pytest.mark.battery
def test_three_epochs_of_the_quickstart_killed_and_resumed_run_each_key_once(tmp_path):
    folder = tmp_path / "run"
    killed = start(run_args(folder), tmp_path / "cache")
    wait_for_results(folder, 3, killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert len(lines(folder / "results.jsonl")) < 12  # it really stopped midway

    resumed = start(run_args(folder), tmp_path / "cache")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "episodes already done" in err and "of 12 episodes" in err

    written = Counter(r["key"] for r in lines(folder / "results.jsonl"))
    expected = {
        result_key(case, system, epoch)
        for case in ("q13", "q14")
        for system in ("direct-none", "direct-full")
        for epoch in (1, 2, 3)
    }
    assert set(written) == expected and len(expected) == 12
    assert set(written.values()) == {1}  # each key once: nothing run twice, nothing lost
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["epochs"] == 3 and summary["episodes"]["scored"] == 12
    for system in ("direct-none", "direct-full"):
        judge = summary["systems"][system]["judges"]["lampqa_aspects"]
        spread = judge["epoch_spread"]
        assert judge["n"] == 2 and spread["epochs"] == 3 and spread["n_scores"] == 6
        assert spread["mean_case_std"] is not None and spread["epoch_means_std"] is not None
        assert len(spread["epoch_means"]) == 3 and sorted(judge["case_means"]) == ["q13", "q14"]


def test_each_epoch_has_its_own_trace_ledger_calls_and_view_page(tmp_path, cache_dir):
    import lxml.html

    from atelier.agents.models.ledger import read_ledger
    from atelier.runs.reading.trace import load_trace
    from atelier.runs.reading.view import write_static

    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["benchmark"]["limit"] = 1
    data["run"]["epochs"] = 2
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    ledger = read_ledger(folder.ledger)
    assert {e.epoch for e in ledger if e.system == "direct-full"} == {1, 2}  # each call knows its epoch
    first, second = (load_trace(folder.path, "q13", "direct-full", epoch) for epoch in (1, 2))
    calls = lambda steps: {c.entry.call_id for s in steps for c in s.calls}
    assert calls(first) and calls(second) and not calls(first) & calls(second)
    assert {e.call_id for e in ledger if e.epoch == 2 and e.system == "direct-full"} >= calls(second)
    with pytest.raises(ConfigError, match="--epoch 3: this run has epochs 1 to 2"):
        load_trace(folder.path, "q13", "direct-full", 3)

    index = write_static(folder.path, tmp_path / "view")
    rows = lxml.html.parse(str(index)).getroot().xpath("//tr[@class='episode']")
    assert sorted(r.get("data-key") for r in rows) == sorted(
        json.loads(line)["key"] for line in folder.results.read_text().splitlines()
    )
    assert sorted(" ".join(r.xpath(".//td[contains(@class, 'epoch')]")[0].text_content().split()) for r in rows) == [
        "1",
        "1",
        "2",
        "2",
    ]
    pages = {r.xpath(".//a")[0].get("href") for r in rows}
    assert len(pages) == 4 and all((tmp_path / "view" / p).exists() for p in pages)


def test_trace_names_a_missing_epoch_in_one_line(tmp_path, cache_dir):
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["benchmark"]["limit"] = 1
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atelier.runs.cli",
            "trace",
            str(folder.path),
            "q13",
            "--system",
            "direct-full",
            "--epoch",
            "2",
            "--all",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "--epoch 2: this run has one epoch" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_paired_comparisons_take_each_case_once_as_its_mean_over_epochs():
    from atelier.runs.reading.comparisons import scores_by_case, versus_baseline

    records = [
        record("q1", "a", 1, 0.2),
        record("q1", "a", 2, 0.6),
        record("q2", "a", 1, 1.0),
        record("q2", "a", 2, 0.0),
    ]
    records += [
        record("q1", "b", 1, 0.1),
        record("q1", "b", 2, 0.1),
        record("q2", "b", 1, 0.3),
        record("q2", "b", 2, 0.3),
    ]
    assert scores_by_case(records, "a", "j") == pytest.approx({"q1": 0.4, "q2": 0.5})  # not the last epoch's
    row = versus_baseline(records, ["b", "a"], ["j"], "b")["rows"][0]
    assert row["n"] == 2 and row["mean_difference"] == pytest.approx(((0.4 - 0.1) + (0.5 - 0.3)) / 2)


def test_the_reports_case_view_shows_every_epoch_and_scores_each_case_as_the_summary_does(tmp_path, cache_dir):
    """With epochs the case index shows what the summary counts for a case (its mean over scored
    epochs), each cell holds every epoch's response, and every link of the page (the "what went
    wrong" panel links each degraded episode, epoch 2's included) leads to an element of it; opened
    at a later epoch's link, Chromium shows that epoch's details open."""
    from tests.test_report import render, table

    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["benchmark"]["limit"] = 2
    data["run"]["epochs"] = 2
    data["systems"][1]["memory"]["budget_tokens"] = 300  # cuts the history: degraded in both epochs
    folder = run_recipe(parse_recipe(data), tmp_path / "run", progress=False)
    summary = json.loads(folder.summary.read_text())
    records = [json.loads(line) for line in folder.results.read_text().splitlines()]
    assert {r["epoch"] for r in records} == {1, 2}
    page = folder.path / "report.html"
    doc = render(page)

    ids = set(doc.xpath("//@id"))
    links = [href[1:] for href in doc.xpath("//a/@href") if href.startswith("#")]
    assert links and not [link for link in links if link not in ids]  # no dead link
    degraded = {d["kind"]: d for d in summary["episodes"]["degraded"]}["memory_budget_cut"]
    assert any(key.endswith("::epoch2") for key in degraded["episodes"])
    panel = doc.xpath('//table[@id="degraded"]//a/@href')
    assert "#cell-q13--direct-full--epoch2" in panel and "cell-q13--direct-full--epoch2" in ids

    means = {s: summary["systems"][s]["judges"]["lampqa_aspects"]["case_means"] for s in summary["systems"]}
    rows = {row[0]: row for row in table(doc, "case-index")}
    for case in ("q13", "q14"):
        shown = [cell.split(" (")[0] for cell in rows[case][2:4]]  # the two systems' (then difference, degraded)
        assert shown == [f"{means['direct-none'][case]:.3f}", f"{means['direct-full'][case]:.3f}"]
        assert all("(2 of 2)" in cell for cell in rows[case][2:4])

    for record in records:
        case, system = record["case_id"], record["system"]
        cell = doc.xpath(f'//div[@class="cell" and @id="cell-{case}--{system}"]')[0]
        epochs = cell.xpath('./details[@class="epoch"]')
        assert len(epochs) == 2
        summary_line = " ".join(epochs[record["epoch"] - 1].xpath("./summary")[0].text_content().split())
        assert summary_line == f"epoch {record['epoch']}: lampqa_aspects {record['scores']['lampqa_aspects']:.3f}"
        assert record["response"]["text"].split()[0] in epochs[record["epoch"] - 1].text_content()

    opened = render_at(page, "cell-q14--direct-none--epoch2")
    [second] = opened.xpath('//details[@id="cell-q14--direct-none--epoch2"]')
    assert second.get("open") is not None
    assert doc.xpath('//details[@id="cell-q14--direct-none--epoch2"]')[0].get("open") is None  # closed unless linked


def render_at(path, fragment: str):
    """The DOM after Chromium opened the page at `#fragment`."""
    import lxml.html

    from tests.test_report import browser

    url = path.resolve().as_uri() + "#" + fragment
    base = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2400", "--dump-dom", url]
    return lxml.html.fromstring(subprocess.run(base, capture_output=True, text=True, timeout=120, check=True).stdout)
