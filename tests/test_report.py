"""report.html rendered by a real browser (headless Chromium): its tables agree with summary.json,
each case shows its query, recalled memory and the systems side by side; a run where everything
failed gets a page that says so. Plus the comparison math behind it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.reading.comparisons import adjust, detail_value, versus_paper

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return CHROMIUM


def render(path, screenshot=None):
    """The DOM after Chromium loaded the page (and, optionally, a screenshot of it)."""
    import lxml.html

    base = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2400"]
    url = path.resolve().as_uri()
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    if screenshot is not None:
        subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
    return lxml.html.fromstring(dom)


def table(doc, table_id: str) -> list[list[str]]:
    rows = doc.xpath(f'//table[@id="{table_id}"]/tr | //table[@id="{table_id}"]/tbody/tr')
    return [[" ".join(cell.text_content().split()) for cell in row.xpath("./td")] for row in rows if row.xpath("./td")]


def recipe(tmp_path, model="scripted", baseline="none"):
    return parse_recipe(
        {
            "name": "report-test",
            "benchmark": {"name": "tiny"},
            "models": {"system": {"model": model, "max_retries": 0}, "judge": {"model": "scripted"}},
            "systems": [
                {"name": "none", "memory": {"backend": "none"}},
                {"name": "full", "memory": {"backend": "full"}},
                {"name": "persona", "memory": {"backend": "persona"}, "setting": "persona"},
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "report": {
                "baseline": baseline,
                "reproduces": "Nobody et al., Table 0",
                "paper": [
                    {"row": "their system", "system": "full", "judge": "lampqa_aspects", "values": {"score": 0.61}}
                ],
            },
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


def test_the_rendered_report_agrees_with_summary_json(tmp_path, cache_dir):
    from PIL import Image

    folder = run_recipe(recipe(tmp_path), tmp_path / "run", progress=False)
    summary = json.loads(folder.summary.read_text())
    doc = render(folder.report, screenshot=tmp_path / "report.png")

    image = Image.open(tmp_path / "report.png").convert("L")
    assert image.size == (1400, 2400)
    low, high = image.getextrema()
    assert high - low > 100  # something was drawn, not a blank page

    scores = {(row[0], row[1]): row for row in table(doc, "scores")}
    assert len(scores) == 3
    for system, entry in summary["systems"].items():
        stats = entry["judges"]["lampqa_aspects"]
        row = scores[(system, "lampqa_aspects")]
        assert row[2] == str(stats["n"]) == "3"
        assert row[3] == f"{stats['mean']:.3f}"
        assert row[4] == f"[{stats['ci95'][0]:.3f}, {stats['ci95'][1]:.3f}]"

    criteria = {row[0]: row[1:] for row in table(doc, "criteria-lampqa_aspects")}  # the judge's own figures
    for system, entry in summary["systems"].items():
        means = entry["judges"]["lampqa_aspects"]["criteria"]
        assert criteria[system] == [f"{means[name]:.3f}" for name in means]

    systems = {row[0]: row for row in table(doc, "systems")}
    for system, entry in summary["systems"].items():
        calls = entry["usage"]["calls"]["system"]
        row = systems[system]
        assert row[3] == str(entry["n"]) and row[4] == str(entry["errors"])
        assert row[5] == (str(entry["degraded_episodes"]) if entry["degraded"] else "0") + (
            ": " + ", ".join(f"{k} {n}" for k, n in entry["degraded"].items()) if entry["degraded"] else ""
        )
        uncached = entry["usage"]["uncached"]["system"]
        assert row[6] == str(calls["calls"]) and row[7] == f"{calls['prompt_tokens'] + calls['completion_tokens']:,}"
        assert row[9] == f"{uncached['prompt_tokens'] + uncached['completion_tokens']:,}"  # as spent and uncached
        assert row[11] == f"{100 * uncached['cache_hit_share']:.0f}%"
        assert row[13] == f"{entry['usage']['latency_s']['mean']:.3f}"

    baseline = table(doc, "baseline")
    expected = summary["versus_baseline"]["rows"]
    assert summary["versus_baseline"]["baseline"] == "none" and len(baseline) == len(expected) == 2
    for row, comparison in zip(baseline, expected):
        assert row[:3] == [comparison["judge"], comparison["system"], str(comparison["n"])]
        assert row[5] == f"{comparison['mean_difference']:+.3f}"
        assert row[8] == f"{comparison['p_adjusted']:.3g}"

    paper = table(doc, "paper")
    assert paper == [
        ["their system", "full", "lampqa_aspects", "score", "0.610", f"{summary['paper'][0]['ours']:.3f}", "3"]
    ]
    assert summary["paper"][0]["ours"] == pytest.approx(summary["systems"]["full"]["judges"]["lampqa_aspects"]["mean"])

    # each case: the query, and the systems side by side with recalled memory and rendered judge details
    sections = doc.xpath('//section[@class="case"]')
    assert len(sections) == 3
    first = sections[0]
    assert "Plan my meals for a training week." in first.xpath('.//div[@class="query"]')[0].text_content()
    cells = first.xpath('.//div[@class="cell"]')
    assert [c.xpath(".//h4")[0].text_content() for c in cells] == ["none", "full", "persona"]
    full_memory = cells[1].xpath(".//details/div[@class='text']")[0].text_content()
    assert "I am vegetarian and allergic to soy." in full_memory
    assert "Occupation: tester u1" in cells[2].xpath(".//details/div[@class='text']")[0].text_content()
    # the judge's reasoning as prose, folded: each aspect with its score; the raw JSON hidden
    [judgment] = cells[1].xpath(".//details[contains(@class, 'judgment')]")
    assert judgment.get("open") is None
    reasoning = " ".join(judgment.xpath(".//div[@class='reasoning']")[0].text_content().split())
    key = f"{first.get('data-case')}::full"
    record = next(r for r in map(json.loads, folder.results.read_text().splitlines()) if r["key"] == key)
    for aspect in record["judgments"][0]["details"]["aspects"]:
        assert f"{aspect['match_score']}/2 {aspect['aspect']}" in reasoning
    assert "{" not in reasoning and cells[1].xpath(".//pre[@class='raw'][@hidden]")


def test_a_run_where_everything_failed_gets_a_page_that_says_so(tmp_path, cache_dir):
    folder = run_recipe(recipe(tmp_path, model="scripted?error_rate=1"), tmp_path / "run", progress=False)
    doc = render(folder.report)
    banner = doc.xpath('//*[@id="all-failed"]')
    assert banner and "Every episode failed (9 of 9)" in banner[0].text_content()
    assert not doc.xpath('//table[@id="scores"]') and not doc.xpath("//svg")
    reasons = table(doc, "reasons")
    assert sum(int(row[0]) for row in reasons) == 9 and all("ModelCallError" in row[1] for row in reasons)
    assert len(table(doc, "failed")) == 9


def test_report_re_renders_a_run_folder(tmp_path, cache_dir):
    from typer.testing import CliRunner

    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.cli import app

    folder = run_recipe(recipe(tmp_path), tmp_path / "run", progress=False)
    before = json.loads(folder.summary.read_text())
    folder.report.unlink()
    result = CliRunner().invoke(app, ["report", str(folder.path)])
    assert result.exit_code == 0, result.output
    assert folder.report.exists() and result.stdout.strip() == str(folder.report)
    assert json.loads(folder.summary.read_text()) == before
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert isinstance(missing.exception, ConfigError) and "is not a run folder" in str(
        missing.exception
    )  # exit 2 in main()


def test_benjamini_hochberg_adjusts_p_values_together():
    rows = [{"permutation_p": p} for p in (0.01, 0.04, 0.03, 0.5)] + [{"permutation_p": None}]
    adjusted = [row["p_adjusted"] for row in adjust(rows)]
    # BH: sorted p (0.01, 0.03, 0.04, 0.5) x m / rank, then the running minimum from the top
    assert adjusted[:4] == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5])
    assert adjusted[4] is None and [row["significant"] for row in rows] == [True, False, False, False, False]


def test_paper_metrics_read_headline_scores_or_detail_paths():
    from atelier.agents.judges.base import JudgeResult
    from atelier.runs.folder.results import ResultRecord

    def record(case, score, p):
        return ResultRecord(
            key=f"{case}::s",
            run_id="r",
            case_id=case,
            system="s",
            benchmark="b",
            user_id="u",
            setting="x",
            status="ok",
            judgments=[JudgeResult(judge="pqr", score=score, details={"P": {"overall": p}})],
        )

    assert detail_value({"P": {"overall": 4}}, "P.overall") == 4.0 and detail_value({"P": 1}, "Q") is None
    rows = versus_paper(
        [record("a", 0.5, 4.0), record("b", 0.7, 6.0)],
        [{"row": "paper", "system": "s", "judge": "pqr", "values": {"score": 0.9, "P.overall": 7.1}}],
    )
    assert [(r["metric"], r["paper"], r["ours"], r["n"]) for r in rows] == [
        ("score", 0.9, pytest.approx(0.6), 2),
        ("P.overall", 7.1, 5.0, 2),
    ]


def test_paper_metrics_for_history_retrieval_and_trade_offs():
    from atelier.agents.judges.base import JudgeResult
    from atelier.benchmarks.case import Case, Gold, Query
    from atelier.runs.folder.results import ContextUsed, ResultRecord

    def record(case, ranking, p, d):
        return ResultRecord(
            key=f"{case}::s",
            run_id="r",
            case_id=case,
            system="s",
            benchmark="b",
            user_id="u",
            setting="x",
            status="ok",
            user_context=ContextUsed(backend="retrieval", form="raw", event_ids=ranking),
            judgments=[JudgeResult(judge="aepd", score=p, details={"p": p, "d": d})],
        )

    cases = {
        c: Case(id=c, benchmark="b", user_id="u", query=Query(text="q"), gold=Gold(relevant_history_ids=["e1"]))
        for c in "abcd"
    }
    records = [
        record("a", ["e1", "e2"], 0.9, 0.1),
        record("b", ["e2", "e1"], 0.5, 0.4),
        record("c", ["e3"], 0.2, 0.8),
        record("d", ["e1"], 0.0, 0.5),
    ]
    rows = versus_paper(
        records,
        [
            {
                "row": "paper",
                "system": "s",
                "judge": "aepd",
                "values": {
                    "history.ndcg@1": 0.1,
                    "history.recall@2": 0.2,
                    "kendall_tau(p,d)": -0.3,
                    "n_both_positive(p,d)": 59,
                },
            }
        ],
        cases,
    )
    got = {r["metric"]: (r["ours"], r["n"]) for r in rows}
    assert got["history.ndcg@1"] == (pytest.approx(0.5), 4)  # e1 first in a and d
    assert got["history.recall@2"] == (pytest.approx(0.75), 4)
    assert got["kendall_tau(p,d)"] == (pytest.approx(-1.0), 3)  # d (0.0) is left out: both must be positive
    assert got["n_both_positive(p,d)"] == (3.0, 3)


def test_judge_figures_table_criterion_means_per_system():
    from atelier.runs.reading.report import judge_figures

    summary = {
        "systems": {
            "a": {
                "judges": {
                    "pqr": {
                        "n": 2,
                        "mean": 5.0,
                        "criteria": {"GOAL": 4.0, "CONT": 6.0},
                        "flags": {"x": 1},
                        "reliability": {"FA": 0.5},
                    }
                }
            },
            "b": {"judges": {"pqr": {"n": 2, "mean": 6.0, "criteria": {"GOAL": 5.0, "PRES": 7.0}, "flags": {}}}},
        }
    }
    figures = judge_figures(summary, "pqr")
    assert figures["names"] == ["GOAL", "CONT", "PRES"]
    assert figures["rows"]["b"] == {"GOAL": 5.0, "PRES": 7.0}
    assert figures["extras"] == {"a": {"reliability": {"FA": 0.5}, "flags": {"x": 1}}}
