"""The report and `compare --html` read at any size (issue 35, item 5): the paper table pivoted (a row
per metric: paper values | ours with its 95% CI | n), one case says it has no CI, sorted dot plots
that stay readable at 40 systems, no table wider than the window, and a comparison page with the
config diff, the cases side by side and the plots. Every page is checked in headless Chromium."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from scipy import stats
from typer.testing import CliRunner

from atelier.runs.cli import app
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.layout import RunFolder, load_run_config
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from atelier.runs.folder.results import ResultsFile, result_key
from atelier.runs.reading.comparisons import versus_baseline
from atelier.runs.reading.report import Point, ci_text, dot_plot, paper_tables, write_report
from tests.test_report import browser, table

QUICKSTART = Path(__file__).parent.parent / "runs" / "recipes" / "quickstart.toml"
PAPER = [
    {
        "row": "Their agent",
        "system": "direct-full",
        "judge": "lampqa_aspects",
        "values": {"score": 0.61, "aspect_1": 0.5},
    },
    {"row": "Their other agent", "system": "direct-full", "judge": "lampqa_aspects", "values": {"score": 0.55}},
    {
        "row": "Their baseline",
        "system": "direct-none",
        "judge": "lampqa_aspects",
        "values": {"score": 0.4, "GOAL": 7.5},
    },
]


def quickstart(out: Path, *, budget_tokens: int = 1500, paper: bool = False):
    """The quickstart recipe on the scripted model, two cases."""
    data = load_recipe(QUICKSTART).model_dump(mode="python")
    data["benchmark"]["limit"] = 2
    data["systems"][1]["memory"]["budget_tokens"] = budget_tokens
    data["run"]["out_dir"] = str(out.parent)
    if paper:
        data["report"]["paper"] = PAPER
    return run_recipe(parse_recipe(data), out, progress=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two quickstart runs that differ in one key: the full-history system's memory budget."""
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATELIER_CACHE_DIR", str(root / "cache"))
        return quickstart(root / "a", paper=True), quickstart(root / "b", budget_tokens=300)


def measured(path: Path, tmp_path: Path, width: int = 1280) -> tuple[Any, int, int]:
    """Chromium's DOM of the page, with the page's scroll width and the window's inner width as
    Chromium laid them out (written into the DOM by a script added to a copy of the page)."""
    import lxml.html

    probe = (
        "<script>document.body.dataset.scrollWidth = document.documentElement.scrollWidth;"
        "document.body.dataset.innerWidth = window.innerWidth;</script></body>"
    )
    copy = tmp_path / f"probe-{path.name}"
    copy.write_text(path.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},1000"]
    dom = subprocess.run(
        [*command, "--dump-dom", copy.resolve().as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    doc = lxml.html.fromstring(dom)
    body = doc.xpath("//body")[0]
    return doc, int(body.get("data-scroll-width")), int(body.get("data-inner-width"))


def labels(doc, gid: str, panel: int = 0) -> list[str]:
    """A dot plot panel's y labels, top to bottom."""
    groups = doc.xpath(f'//*[starts-with(@id, "{gid}-{panel}-label-")]')
    ordered = sorted(groups, key=lambda g: int(g.get("id").rsplit("-", 1)[1]))
    return [" ".join(g.text_content().split()) for g in ordered]


# ----------------------------------------------------------------------------- the paper table


def test_the_paper_table_is_pivoted_a_row_per_metric_with_ours_ci_and_n(runs, tmp_path):
    folder = runs[0]
    summary = json.loads(folder.summary.read_text())
    doc, scroll, inner = measured(folder.report, tmp_path)
    assert scroll <= inner

    full = doc.xpath('//table[@data-system="direct-full"]')[0]
    header = [" ".join(th.text_content().split()) for th in full.xpath(".//th")]
    assert header == ["metric", "paper: Their agent", "paper: Their other agent", "ours (95% CI)", "n"]
    rows = {row[0]: row for row in table(doc, full.get("id"))}
    assert list(rows) == ["score", "aspect_1"]  # one row per metric, not one per (paper row, metric)
    ours = next(p for p in summary["paper"] if p["system"] == "direct-full" and p["metric"] == "score")
    stats = summary["systems"]["direct-full"]["judges"]["lampqa_aspects"]
    assert ours["ours"] == pytest.approx(stats["mean"]) and ours["ci95"] == pytest.approx(stats["ci95"])
    low, high = ours["ci95"]
    assert rows["score"] == ["score", "0.610", "0.550", f"{ours['ours']:.3f} [{low:.3f}, {high:.3f}]", "2"]
    assert rows["aspect_1"][1:3] == ["0.500", "–"]  # the other paper row does not report it

    none = {row[0]: row for row in table(doc, doc.xpath('//table[@data-system="direct-none"]')[0].get("id"))}
    assert none["GOAL"][1:] == ["7.500", "not measured", "0"]  # unmeasured stays visibly so, never 0
    assert doc.xpath('//table[@id="paper"]/ancestor::details')  # the long form is folded away


def test_one_case_says_it_has_no_ci():
    assert ci_text([0.6, 0.6], 1) == "one case, no CI"
    assert ci_text([0.4, 0.8], 3) == "[0.400, 0.800]"
    assert ci_text([None, None], 0) == "–"
    assert ci_text([None, None], 5) == "no CI"  # a rank correlation: not a mean, no bootstrap
    pivoted = paper_tables(
        [
            {
                "row": "A",
                "system": "s",
                "judge": "j",
                "metric": "score",
                "paper": 0.5,
                "ours": 0.6,
                "ci95": [None, None],
                "n": 1,
            },
            {
                "row": "B",
                "system": "s",
                "judge": "j",
                "metric": "score",
                "paper": 0.7,
                "ours": 0.6,
                "ci95": [None, None],
                "n": 1,
            },
            {
                "row": "B",
                "system": "s",
                "judge": "j",
                "metric": "CC",
                "paper": 9.0,
                "ours": None,
                "ci95": [None, None],
                "n": 0,
            },
        ]
    )
    assert pivoted == [
        {
            "system": "s",
            "judge": "j",
            "columns": ["A", "B"],
            "metrics": [
                {"metric": "score", "paper": {"A": 0.5, "B": 0.7}, "ours": 0.6, "ci95": [None, None], "n": 1},
                {"metric": "CC", "paper": {"B": 9.0}, "ours": None, "ci95": [None, None], "n": 0},
            ],
        }
    ]


def test_paper_numbers_over_epochs_count_cases_each_its_mean_over_epochs():
    from atelier.agents.judges.base import JudgeResult
    from atelier.runs.folder.results import ResultRecord
    from atelier.runs.reading.comparisons import versus_paper

    def record(case: str, epoch: int, score: float) -> ResultRecord:
        return ResultRecord(
            key=result_key(case, "s") + f"#{epoch}",
            run_id="r",
            case_id=case,
            system="s",
            benchmark="b",
            user_id="u",
            setting="x",
            epoch=epoch,
            status="ok",
            judgments=[JudgeResult(judge="j", score=score)],
            scores={"j": score},
        )

    rows: list[Mapping[str, Any]] = [{"row": "theirs", "system": "s", "judge": "j", "values": {"score": 0.5}}]
    records = [record("q1", 1, 0.2), record("q1", 2, 0.4), record("q1", 3, 0.6)]
    [one] = versus_paper(records, rows)
    assert one["n"] == 1 and one["ours"] == pytest.approx(0.4) and one["ci95"] == [None, None]
    [two] = versus_paper([*records, record("q2", 1, 1.0), record("q2", 2, 0.8)], rows)
    assert two["n"] == 2 and two["ours"] == pytest.approx((0.4 + 0.9) / 2)
    theirs = stats.ttest_1samp([0.4, 0.9], 0.0).confidence_interval(0.95)
    assert two["ci95"] == pytest.approx([theirs.low, theirs.high])  # Student's t over the two case means


# ----------------------------------------------------------------------------- 40 systems


JUDGES = ["lampqa_aspects", "pqr", "bespoke", "aepd"]
CRITERIA = ["GOAL", "CONT", "PRES", "ACTI", "DEIN", "LOGC", "CLAR", "FA", "CC", "P", "Q", "R"]


def forty_systems(folder: RunFolder, *, one_case: str | None = None, epochs: dict | None = None):
    """Run a's config, summary and records grown to 40 systems and four judges (each system's scores
    spread so that none ties), for a page no real run on this machine could afford."""
    config = load_run_config(folder.path)
    summary = json.loads(folder.summary.read_text())
    records = [r for r in ResultsFile(folder.results).load().values() if r.system == "direct-full"]
    spec = config["recipe"]["systems"][1]
    names = [f"system-{i:02d}" + ("-hierarchical-memory-over-chromadb" if i % 5 == 0 else "") for i in range(40)]
    template = summary["systems"]["direct-full"]
    config["recipe"]["systems"] = [{**spec, "name": name} for name in names]
    summary["judges"], summary["systems"], grown = JUDGES, {}, []
    for i, name in enumerate(names):
        base = ((i * 17) % 40) / 40  # a shuffled order: the chart must sort it
        scores = {judge: [round(base + 0.01 * k + 0.001 * j, 4) for j in range(2)] for k, judge in enumerate(JUDGES)}
        n = 1 if name == one_case else 2
        grown += [
            r.model_copy(
                update={
                    "key": result_key(r.case_id, name),
                    "system": name,
                    "scores": {judge: scores[judge][c] for judge in JUDGES},
                }
            )
            for c, r in enumerate(records[:n])
        ]
        judges = {}
        for judge in JUDGES:
            values = scores[judge][:n]
            mean = sum(values) / n
            judges[judge] = {
                **template["judges"]["lampqa_aspects"],
                "n": n,
                "mean": mean,
                "ci95": [mean - 0.05, mean + 0.05] if n > 1 else [mean, mean],
                "criteria": {c: mean for c in CRITERIA} if judge == "pqr" else {},
            }
        summary["systems"][name] = {**template, "judges": judges}
    summary["versus_baseline"] = versus_baseline(grown, names, JUDGES, names[0])
    summary["paper"] = [
        {"row": f"Paper system {k} with a long name", "system": names[0], "judge": "pqr", "metric": metric}
        | {"paper": 5.0 + k / 10, "ours": 0.5, "ci95": [0.45, 0.55], "n": 2}
        for k in range(9)
        for metric in CRITERIA
    ]
    if epochs is not None:
        summary["epochs"] = epochs
    return config, summary, grown, names


@pytest.mark.battery
def test_forty_systems_get_a_sorted_dot_plot_a_panel_per_judge_and_no_page_wider_than_the_window(
    runs, tmp_path, monkeypatch
):
    config, summary, records, names = forty_systems(runs[0], one_case="system-07")
    path = tmp_path / "report.html"
    write_report(path, config=config, summary=summary, records=records)

    doc, scroll, inner = measured(path, tmp_path)
    assert inner == 1280 and scroll <= inner, (scroll, inner)  # every table wraps at 40 systems x 4 judges
    for panel, judge in enumerate(JUDGES):  # small multiples: one panel per judge, each its own order
        shown = labels(doc, "score-dots", panel)
        assert len(shown) == 40 and set(shown) == set(names)
        means = [summary["systems"][name]["judges"][judge]["mean"] for name in shown]
        assert means == sorted(means, reverse=True)  # best on top
    chart = doc.xpath('//*[@id="score-chart"]//svg')
    assert len(chart) == 1 and "lampqa_aspects" in chart[0].text_content() and "aepd" in chart[0].text_content()
    # the cost chart is a row per system (names on the y axis, sorted by the first judge): no key needed
    assert sorted(labels(doc, "cost")) == sorted(names) and not doc.xpath('//ol[@id="cost-key"]')

    scores = {(row[0], row[1]): row for row in table(doc, "scores")}
    assert len(scores) == 160
    assert scores[("system-07", "pqr")][2:5] == [
        "1",
        f"{summary['systems']['system-07']['judges']['pqr']['mean']:.3f}",
        "one case, no CI",
    ]

    # too many systems for a column each: the index shows the baseline and the system compared
    index = doc.xpath('//table[@id="case-index"]')[0]
    shown = [th.get("data-system") for th in index.xpath(".//th[contains(@class, 'index-system')][not(@hidden)]")]
    assert index.get("data-wide") == "yes" and shown == [names[0], names[1]]
    assert len(table(doc, "case-index")) == 2  # a row per case
    groups = doc.xpath('//table[contains(@class, "paper-pivot")]')
    assert len(groups) == 1 and len(table(doc, groups[0].get("id"))) == len(CRITERIA)  # 108 numbers, 12 rows

    # every column shown: the index scrolls in its own box, the page stays as wide as the window
    monkeypatch.setattr("atelier.runs.reading.report.WIDE_INDEX", 10**6)
    write_report(path, config=config, summary=summary, records=records)
    doc, scroll, inner = measured(path, tmp_path)
    assert scroll <= inner and len(doc.xpath("//table[@id='case-index']//th[contains(@class, 'index-system')]")) == 40


def test_a_dot_plot_svg_names_each_system_once_per_panel_and_leaves_unmeasured_out():
    import lxml.etree

    points = [Point(label=f"s{i}", mean=i / 40, low=i / 40 - 0.1, high=i / 40 + 0.1, n=5) for i in range(40)]
    points.append(Point(label="nothing", mean=None, n=0))
    svg = dot_plot({"judge": points}, xlabel="mean", gid="dots")
    assert svg is not None
    root = lxml.etree.fromstring(svg.encode())
    shown = [
        " ".join("".join(g.itertext()).split())
        for g in sorted(
            root.xpath('//*[starts-with(@id, "dots-0-label-")]'), key=lambda g: int(g.get("id").rsplit("-", 1)[1])
        )
    ]
    assert shown == [f"s{i}" for i in range(39, -1, -1)]
    assert "judge (1 not measured)" in "".join(root.itertext())
    assert dot_plot({"judge": [Point(label="x", mean=None)]}, xlabel="mean", gid="dots") is None


@pytest.mark.battery
def test_the_between_epoch_spread_is_shown_when_summary_has_it_and_nothing_changes_without(runs, tmp_path):
    config, summary, records, names = forty_systems(runs[0])
    path = tmp_path / "report.html"
    write_report(path, config=config, summary=summary, records=records)
    assert 'id="epochs"' not in path.read_text()  # one epoch: no section, nothing else moves

    summary["epochs"] = 3
    for i, name in enumerate(names):  # as runs.summary writes it: per system and judge
        summary["systems"][name]["judges"]["pqr"]["epoch_spread"] = {
            "epochs": 3,
            "n_scores": 6,
            "n_cases_repeated": 2,
            "mean_case_std": 0.01 * i,
            "epoch_means": [0.5, 0.5 + 0.01 * i, None],
            "epoch_means_std": 0.005 * i,
        }
        summary["systems"][name]["judges"]["pqr"]["case_means"] = {"q1": 0.5, "q2": 0.6}
    write_report(path, config=config, summary=summary, records=records)
    doc, scroll, inner = measured(path, tmp_path)
    assert scroll <= inner
    assert "ran 3 times" in doc.xpath('//*[@id="epochs"]/following-sibling::p[1]')[0].text_content()
    rows = {row[0]: row for row in table(doc, "epoch-spread")}
    assert len(rows) == 40
    assert rows["system-05-hierarchical-memory-over-chromadb"][1:] == [
        "pqr",
        "6",
        "2",
        "0.050",
        "0.025",
        "0.500 · 0.550 · –",
    ]
    assert "case_means" not in path.read_text()  # not dumped among the judge's further figures


# ----------------------------------------------------------------------------- compare --html


def test_compare_html_shows_the_config_diff_the_cases_side_by_side_and_the_plots(runs, tmp_path):
    a, b = runs
    page = tmp_path / "compare.html"
    result = CliRunner().invoke(app, ["compare", str(a.path), str(b.path), "--html", str(page)])
    # run b is degraded (its budget cut history): compare ends as that run did, exit 3, and says why
    assert result.exit_code == 3, result.output
    assert "b: degraded: 2 episodes (by kind: memory_budget_cut" in result.output
    line = next(line for line in result.output.splitlines() if line.startswith("configs differ in "))
    # a paper row only run a has is one key, not one per field (issue 53)
    assert line.endswith(
        "differ in 4 keys: systems[direct-full].memory.budget_tokens, report.paper[Their agent], "
        "report.paper[Their other agent], report.paper[Their baseline]"
    )
    doc, scroll, inner = measured(page, tmp_path)
    assert scroll <= inner

    named = " ".join(li.text_content() for li in doc.xpath("//ul/li"))
    assert "a" in named.split() and "b" in named.split()  # both runs, by their labels
    header = [th.text_content() for th in doc.xpath('//table[@id="config-diff"]//tr[1]/th')]
    assert header[-2:] == ["a", "b"]
    differing = {row[1]: row[2:] for row in table(doc, "config-diff")}
    assert differing["systems[direct-full].memory.budget_tokens"] == ["1500", "300"]
    baseline_row = json.loads(differing["report.paper[Their baseline]"][0])  # only a has paper rows
    assert baseline_row["values"]["GOAL"] == 7.5 and differing["report.paper[Their baseline]"][1] == "(absent)"
    assert all(row[0] == "≠" for row in table(doc, "config-diff"))
    same = {row[1]: row[2:] for row in table(doc, "config-same")}
    assert same["systems[direct-none].memory.budget_tokens"] == ["2000", "2000"] and "seed" in same

    results = {run: ResultsFile(folder.results).load() for run, folder in (("a", a), ("b", b))}
    rows = doc.xpath('//table[@id="case-rows"]//tr[@data-case]')
    assert sorted(row.get("data-case") for row in rows) == sorted({r.case_id for r in results["a"].values()})
    first = rows[0]
    cells = {cell.get("data-entry"): cell for cell in first.xpath('.//div[@class="cell"]')}
    assert list(cells) == ["a:direct-none", "a:direct-full", "b:direct-none", "b:direct-full"]
    record = results["b"][result_key(first.get("data-case"), "direct-full")]
    shown = " ".join(cells["b:direct-full"].xpath('.//span[@class="score"]')[0].text_content().split())
    assert shown == f"lampqa_aspects {record.scores['lampqa_aspects']:.3f}"
    assert record.response is not None
    excerpt = cells["b:direct-full"].xpath('.//div[@class="excerpt"]')[0].text_content()
    assert excerpt.rstrip("…") == record.response.text[: len(excerpt.rstrip("…"))] and excerpt.strip()

    assert sorted(labels(doc, "compare-dots")) == sorted(cells)  # every entry's mean with its CI
    assert len(labels(doc, "difference-dots")) == 3  # every entry against the baseline a:direct-none


def test_the_run_table_in_the_terminal_says_one_case_has_no_ci(tmp_path, capsys):
    from atelier.runs.cli.run import _print_summary

    ledger = {"calls": 1, "provider_calls": 0, "cache_hits": 1, "prompt_tokens": 1, "completion_tokens": 1}
    judged = {"n": 1, "mean": 0.5, "ci95": [0.5, 0.5], "failed": 0}
    two = {"n": 2, "mean": 0.5, "ci95": [0.25, 0.75], "failed": 0}
    summary = {"dry_run": True, "ledger": ledger, "systems": {"a": {"errors": 0, "judges": {"j": judged, "k": two}}}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    _print_summary(path)
    printed = capsys.readouterr().err
    assert "one case, no CI" in printed and "[0.500, 0.500]" not in printed and "0.250" in printed


def test_a_cost_chart_of_a_few_systems_names_each_row_and_starts_its_cost_axis_at_0(runs):
    import lxml.html

    doc = lxml.html.parse(str(runs[0].path / "report.html")).getroot()
    [svg] = doc.xpath('//*[@id="cost-chart"]//svg')
    assert sorted(labels(doc, "cost")) == ["direct-full", "direct-none"]
    assert "axis from 0" in svg.text_content() and not doc.xpath('//ol[@id="cost-key"]')


def test_the_report_shows_what_the_memory_budget_kept_per_system(runs):
    import lxml.html

    folder = runs[1].path  # direct-full under a 300-token budget: the quickstart's histories are cut
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    shares = [r["user_context"]["share"] for r in records if r["system"] == "direct-full"]
    kept = [s["tokens_kept"] / s["tokens_offered"] for s in shares]
    doc = lxml.html.parse(str(folder / "report.html")).getroot()
    rows = {r[0]: r for r in table(doc, "context-share")}
    assert set(rows) == {"direct-full"}  # direct-none packs nothing
    system, budget, episodes, _, mean, least, cut = rows["direct-full"]
    assert (budget, episodes) == ("300", str(len(shares)))
    assert mean == f"{sum(kept) / len(kept):.3f}" and least == f"{min(kept):.3f}" and float(least) < 1
    assert cut == str(sum(1 for s in shares if s["events_kept"] < s["events_offered"])) != "0"
