"""The run's reading page (issue 53) in a real browser: headless Debian Chromium driven by selenium,
one browser for the module.

A four-case comparison — `rag` with BM25 retrieval against `rag` with a profile memory that ingests
with several model calls per user, judged by PQR on the scripted model — is read as a researcher
reads it: the summary fits two screens and the whole default page 8,000 px; each judgment is one
folded line that opens onto prose (per criterion the score, weight and explanation the record
holds; the claims with source and verdict), its raw JSON one click away and hidden before; a
citation shows the cited source's text (the file the run stored) on hover and on click; the diff
against the baseline rebuilds both responses; the cases filter and sort by difference, judge and
degradation kind (every kind of benchmarks/common/degradation.py offered); keys move and open. No
two text boxes of a plot or a table header overlap and no word is broken inside — and a planted
page with both faults fails that check. A rerun into a new folder, every call from the response
cache, reports the first run's tokens as uncached, and the memory's ingest is counted per user.
The issue's own PDR comparison (BM25 against mem0, 130-odd ingest calls per user) is the battery
test at the end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atelier.benchmarks.common.degradation import KINDS, Degradation
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from tests.chromium import CHROMIUM, DRIVER, chrome

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None, reason="needs Debian's chromium and chromium-driver"
)

SCREEN = 1000  # px: one screen of a 1400 x 1000 window
SYSTEMS = ("rag-bm25", "rag-profile")


def recipe(out: Path, *, name: str = "reading") -> dict:
    return {
        "name": name,
        "benchmark": {"name": "sample", "limit": 4},
        "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
        "judges": [{"name": "pqr"}],
        "systems": [
            {"name": "rag-bm25", "pipeline": "rag", "memory": {"backend": "retrieval", "method": "bm25", "k": 5}},
            # a profile folded in 200-token chunks: several model calls per user's ingest
            {"name": "rag-profile", "pipeline": "rag", "memory": {"backend": "profile", "chunk_tokens": 200}},
        ],
        "run": {"out_dir": str(out)},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The comparison, and the same recipe run again into a new folder (every call from the cache)."""
    root = tmp_path_factory.mktemp("reading")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATELIER_CACHE_DIR", str(root / "cache"))
        first = run_recipe(parse_recipe(recipe(root)), root / "first", progress=False)
        again = run_recipe(parse_recipe(recipe(root)), root / "again", progress=False)
    return first.path, again.path


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    chrome_ = chrome(tmp_path_factory.mktemp("chromium-profile"), height=SCREEN, console_log=True)
    try:
        yield chrome_
    finally:
        chrome_.quit()


def open_page(driver, path: Path, fragment: str = ""):
    driver.set_window_size(1400, SCREEN)
    driver.get(path.resolve().as_uri() + fragment)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors  # the page's scripts ran without an error
    return driver


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def press(driver, keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def records_of(run: Path):
    return ResultsFile(run / "results.jsonl").load()


# A page's layout faults, measured by the browser: pairs of text boxes that overlap inside one plot
# (SVG text) or one table header row, and words of a header or plot laid out on more than one line.
LAYOUT_FAULTS = """
const faults = {overlaps: [], broken: []};
function box(node) {
  const range = document.createRange();
  range.selectNodeContents(node);
  const r = range.getBoundingClientRect();
  return r.width > 0 && r.height > 0 ? r : null;
}
function overlap(a, b) {
  const x = Math.min(a.right, b.right) - Math.max(a.left, b.left);
  const y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
  return x > 1 && y > 1;
}
function pairs(nodes, where, measure) {
  const shown = nodes.map(n => [n, measure(n)]).filter(([n, r]) => r && n.textContent.trim());
  for (let i = 0; i < shown.length; i++)
    for (let j = i + 1; j < shown.length; j++)
      if (overlap(shown[i][1], shown[j][1]))
        faults.overlaps.push([where, shown[i][0].textContent.trim(), shown[j][0].textContent.trim()]);
}
function words(node, where) {
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(text.data))) {
      const range = document.createRange();
      range.setStart(text, m.index);
      range.setEnd(text, m.index + m[0].length);
      const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (tops.size > 1) faults.broken.push([where, m[0]]);
    }
  }
}
document.querySelectorAll("svg").forEach((svg, i) => {
  if (!svg.getClientRects().length) return;
  pairs(Array.from(svg.querySelectorAll("text")), "plot " + i, n => { const r = n.getBoundingClientRect(); return r.width ? r : null; });
});
document.querySelectorAll("tr").forEach((tr, i) => {
  const heads = Array.from(tr.children).filter(c => c.tagName === "TH" && c.getClientRects().length);
  if (!heads.length) return;
  pairs(heads, "header row " + i, box);
  heads.forEach(th => words(th, "header " + th.textContent.trim()));
});
return faults;
"""


def layout_faults(driver) -> dict:
    return js(driver, LAYOUT_FAULTS)


# ----------------------------------------------------------------------------- the page's size


def test_the_summary_fits_two_screens_and_the_whole_page_8000_px(runs, driver):
    first, _ = runs
    open_page(driver, first / "report.html")
    cases_top = js(driver, "return document.getElementById('cases').getBoundingClientRect().top + window.scrollY")
    height = js(driver, "return document.documentElement.scrollHeight")
    assert cases_top <= 2 * SCREEN, cases_top
    assert height < 8000, height
    # folded by default: every judgment, every memory, the raw JSON and the diffs
    assert js(driver, "return document.querySelectorAll('details.judgment[open], details.memory[open]').length") == 0
    assert js(driver, "return Array.from(document.querySelectorAll('pre.raw, .diffs')).every(e => e.hidden)")
    assert js(driver, "return document.querySelectorAll('section.case').length") == 4


# ----------------------------------------------------------------------------- judgments as prose


def test_a_judgment_reads_as_prose_and_its_raw_json_is_one_click_away(runs, driver):
    first, _ = runs
    from atelier.runs.reading.pages import cell_anchor

    records = records_of(first)
    record = records[sorted(records)[0]]
    open_page(driver, first / "report.html")
    cell = driver.find_element("id", cell_anchor(f"{record.case_id}::{record.system}"))
    judgment = cell.find_element("css selector", "details.judgment")
    summary = judgment.find_element("tag name", "summary").text
    [pqr] = record.judgments
    assert summary.startswith(f"pqr {pqr.score:.3g} on 0-10 · P {pqr.details['P']['score']:.2f}")
    assert not judgment.find_element("css selector", ".reasoning").is_displayed()
    judgment.find_element("tag name", "summary").click()
    reasoning = judgment.find_element("css selector", ".reasoning").text
    assert "{" not in reasoning and "criteria_key" not in reasoning  # prose, not the nested details
    for axis in ("P", "Q"):
        for dimension, entry in pqr.details[axis]["dimensions"].items():
            assert f"{axis} · {dimension}: {entry['score']:.3g}/10 · weight {entry['weight']:.3g}" in reasoning
            for c in entry["criteria"]:  # each criterion: score, weight, what it asks, the judge's analysis
                assert f"{c['score']:.3g}/10 {c['id']} (weight {c['weight']:.3g}): {c['criterion']}" in reasoning
                assert c["analysis"] in reasoning and c["explanation"] in reasoning
    facts = pqr.details["R"]
    assert f"R: {facts['n_supported']} of {facts['fa_denominator']} checked claims supported" in reasoning
    for claim in facts["claims"]:
        assert claim["claim"] in reasoning and (claim["url"] or "") in reasoning
    raw = cell.find_element("css selector", "pre.raw")
    assert not raw.is_displayed()
    cell.find_element("css selector", "button.raw-toggle").click()
    assert raw.is_displayed() and json.loads(raw.get_attribute("textContent")) == record.model_dump(mode="json")


def test_every_paper_judge_has_a_reader_and_an_unknown_one_reads_as_lines():
    from atelier.runs.reading.judgment_reading import read_judgment

    bespoke = read_judgment(
        {
            "judge": "mine",  # a label: the shape decides
            "details": {
                "scaled": {"need_alignment": 80.0, "tone": 40.0},
                "feedback": {"need_alignment": "Fits the trip.", "tone": "Too formal."},
                "reasoning": {"tone": "Uses jargon."},
                "gold_information": [{"claim": "A", "present": True}, {"claim": "B", "present": False}],
                "recall": 0.5,
            },
        }
    )
    assert bespoke.kind == "bespoke" and [(line.name, line.score, line.why) for line in bespoke.groups[0].lines] == [
        ("need_alignment", 80.0, "Fits the trip."),
        ("tone", 40.0, "Too formal."),
    ]
    assert [(c.claim, c.verdict) for c in bespoke.claims] == [("A", "present"), ("B", "missing")]
    aspects = read_judgment({"judge": "lampqa", "details": {"aspects": [{"aspect": "Cost", "match_score": 2}]}})
    assert (
        aspects.kind == "lampqa_aspects"
        and aspects.groups[0].lines[0].score == 2
        and aspects.headline == [("aspects met", "1/1")]
    )
    pairwise = read_judgment(
        {
            "judge": "pw",
            "details": {"baseline": "b", "first_order": "response_1", "swapped_order": "response_1", "flipped": True},
        }
    )
    assert pairwise.kind == "lampqa_pairwise" and "order flip" in pairwise.notes[0]
    aepd = read_judgment(
        {
            "judge": "aepd",
            "details": {"repeats": [{"aspects": [{"aspect": "Budget", "personalized": True}], "p_score": 1.0}]},
        }
    )
    assert aepd.kind == "aepd" and aepd.groups[0].lines[0].name == "Budget"
    other = read_judgment({"judge": "x", "details": {"a": {"b": [1, 2]}, "c": "why"}, "criteria": {"k": 0.5}})
    assert other.kind == "generic" and [(line.name, line.why) for line in other.groups[0].lines] == [
        ("a.b", "1, 2"),
        ("c", "why"),
    ]


# ----------------------------------------------------------------------------- citations and the diff


def test_a_citation_shows_the_text_of_its_source_on_hover_and_on_click(runs, driver):
    from selenium.webdriver.common.action_chains import ActionChains

    first, _ = runs
    cited = [r for r in records_of(first).values() if r.ok and r.response.citations]
    assert cited, "the sample's rag answers cite their sources"
    citation = next(c for r in cited for c in r.response.citations if c.number is not None and c.sha256)
    text = (first / "sources" / citation.sha256[:2] / f"{citation.sha256}.txt").read_text()
    open_page(driver, first / "report.html")
    button = driver.find_element("css selector", f'.response button.cite[data-source="src-{citation.sha256[:16]}"]')
    js(driver, "arguments[0].scrollIntoView({block: 'center'})", button)
    popover = driver.find_element("id", "popover")
    assert not popover.is_displayed()
    ActionChains(driver).move_to_element(button).perform()
    assert popover.is_displayed()
    shown = popover.find_element("css selector", ".src-text").get_attribute("textContent")
    assert shown == text[:2400] and (citation.title or "") in popover.text
    ActionChains(driver).move_by_offset(0, -150).perform()  # away (the popover opens below): it closes
    assert not popover.is_displayed()
    button.click()  # a click pins it
    ActionChains(driver).move_by_offset(0, -150).perform()
    assert popover.is_displayed()
    press(driver, "\ue00c")  # Esc
    assert not popover.is_displayed()


def test_the_diff_against_the_baseline_rebuilds_both_responses(runs, driver):
    first, _ = runs
    records = records_of(first)
    open_page(driver, first / "report.html")
    press(driver, "j")  # the first case
    press(driver, "d")
    case = driver.find_element("css selector", "section.case.current")
    case_id = case.get_attribute("data-case")
    diff = case.find_element("css selector", ".diff[data-system='rag-profile'] .diff-text")
    assert diff.is_displayed()
    parts = js(
        driver,
        "return Array.from(arguments[0].childNodes).map(n => [n.nodeName, n.textContent])",
        diff,
    )
    before = "".join(t for kind, t in parts if kind != "INS")
    after = "".join(t for kind, t in parts if kind != "DEL")
    assert before == records[f"{case_id}::rag-bm25"].response.text
    assert after == records[f"{case_id}::rag-profile"].response.text
    assert any(kind == "INS" for kind, _ in parts) and any(kind == "DEL" for kind, _ in parts)
    press(driver, "d")
    assert not diff.is_displayed()


# ----------------------------------------------------------------------------- filter, sort, keys


def _differences(run: Path, judge: str = "pqr") -> dict[str, float]:
    records = records_of(run)
    cases = {r.case_id for r in records.values()}
    return {c: records[f"{c}::rag-profile"].scores[judge] - records[f"{c}::rag-bm25"].scores[judge] for c in cases}


def _shown_cases(driver) -> list[str]:
    return js(
        driver,
        "return Array.from(document.querySelectorAll('#case-index tr.case-row')).filter(r => !r.hidden)"
        ".map(r => r.dataset.case)",
    )


def _section_order(driver) -> list[str]:
    return js(
        driver,
        "return Array.from(document.querySelectorAll('#case-sections section.case')).filter(s => !s.hidden)"
        ".map(s => s.dataset.case)",
    )


def test_cases_sort_and_filter_by_difference_judge_and_degradation(runs, driver, tmp_path):
    from selenium.webdriver.support.select import Select

    from atelier.runs.folder.layout import RunFolder, load_run_config
    from atelier.runs.reading.finish import finish_run

    first, _ = runs
    differences = _differences(first)
    # a copy of the run whose one case rests on a degraded step
    copy = tmp_path / "run"
    shutil.copytree(first, copy, ignore=shutil.ignore_patterns("view"))
    results = ResultsFile(copy / "results.jsonl")
    records = results.load()
    marked = sorted(differences)[1]
    record = records[f"{marked}::rag-profile"]
    step = Degradation(kind="memory_budget_cut", step="memory", count=1, detail="planted")
    (copy / "results.jsonl").unlink()
    for r in records.values():
        if r is record:  # the memory's budget cut its history
            r = r.model_copy(update={"user_context": r.user_context.model_copy(update={"degraded": [step]})})
        results.append(r)
    finish_run(RunFolder(copy), load_run_config(copy))

    open_page(driver, copy / "report.html")
    options = [o.get_attribute("value") for o in driver.find_elements("css selector", "select[name=degraded] option")]
    assert set(KINDS) <= set(options)  # every kind there is, from benchmarks/common/degradation.py
    index = [
        (row.get_attribute("data-case"), row.find_element("css selector", "td.difference").text)
        for row in driver.find_elements("css selector", "#case-index tr.case-row")
    ]
    assert index == [(c, f"{differences[c]:+.3f}") for c in sorted(differences)]

    Select(driver.find_element("css selector", "select[name=sort]")).select_by_value("diff-desc")
    by_difference = sorted(differences, key=lambda c: -differences[c])
    assert _shown_cases(driver) == by_difference == _section_order(driver)  # the sections follow the index
    assert "sort=diff-desc" in driver.current_url  # kept in the URL: a filtered page can be linked to

    least = f"{sorted(abs(d) for d in differences.values())[2] - 5e-7:.6f}"  # the two largest differences
    field = driver.find_element("css selector", "input[name=min]")
    field.send_keys(least)
    expected = [c for c in by_difference if abs(differences[c]) >= float(least)]
    assert _shown_cases(driver) == expected == _section_order(driver) and len(expected) == 2
    driver.find_element("id", "cases-clear").click()  # every filter off again
    assert _shown_cases(driver) == sorted(differences) and field.get_attribute("value") == ""

    Select(driver.find_element("css selector", "select[name=degraded]")).select_by_value("memory_budget_cut")
    assert _shown_cases(driver) == [marked] == _section_order(driver)
    Select(driver.find_element("css selector", "select[name=degraded]")).select_by_value("none")
    assert marked not in _shown_cases(driver) and len(_shown_cases(driver)) == 3
    Select(driver.find_element("css selector", "select[name=degraded]")).select_by_value("search_failed")
    assert _shown_cases(driver) == [] and driver.find_element("id", "no-case-match").is_displayed()

    # opened from a link with the filters in it: the same view
    open_page(driver, copy / "report.html", "#cases?sort=diff-asc&degraded=")
    assert _shown_cases(driver) == list(reversed(by_difference))


def test_keys_move_between_cases_and_open_what_they_hold(runs, driver):
    first, _ = runs
    open_page(driver, first / "report.html")
    order = _section_order(driver)

    def current() -> str:
        return js(driver, "const c = document.querySelector('section.case.current'); return c && c.dataset.case")

    press(driver, "j")
    assert current() == order[0]
    press(driver, "jj")
    assert current() == order[2]
    press(driver, "k")
    assert current() == order[1]
    section = driver.find_element("css selector", "section.case.current")
    top = js(driver, "return arguments[0].getBoundingClientRect().top", section)
    assert js(driver, "return window.scrollY") > 0 and 0 <= top < 60  # at the top, below the sticky bar
    press(driver, "e")
    assert all(d.get_attribute("open") for d in section.find_elements("css selector", "details.judgment"))
    press(driver, "m")
    assert all(d.get_attribute("open") for d in section.find_elements("css selector", "details.memory"))
    press(driver, "r")
    assert all(p.is_displayed() for p in section.find_elements("css selector", "pre.raw"))
    other = driver.find_elements("css selector", f"section.case:not([data-case='{order[1]}']) pre.raw")
    assert not any(p.is_displayed() for p in other)  # only the current case's
    press(driver, "?")
    assert driver.find_element("id", "keys-help").is_displayed()
    press(driver, "\ue00c")
    assert not driver.find_element("id", "keys-help").is_displayed()


# ----------------------------------------------------------------------------- honest plots, whole words


def test_no_plot_or_header_text_overlaps_or_breaks_and_the_axes_say_where_they_start(runs, driver):
    first, _ = runs
    open_page(driver, first / "report.html")
    js(driver, "document.querySelectorAll('details').forEach(d => d.open = true)")  # every figure shown
    assert layout_faults(driver) == {"overlaps": [], "broken": []}
    score = driver.find_element("css selector", "#score-chart svg").get_attribute("textContent")
    assert "axis spans the 95% CIs, not from 0" in score
    cost = driver.find_element("css selector", "#cost-chart svg").get_attribute("textContent")
    assert "axis from 0" in cost and "axis spans the 95% CIs" in cost
    ticks = js(  # the cost panel's x axis starts at 0 (its first tick)
        driver,
        "const t = Array.from(document.querySelectorAll('#cost-chart svg g[id^=xtick] text')).map(e => e.textContent);"
        "return t;",
    )
    assert "0" in ticks
    at_narrow = open_page(driver, first / "report.html")
    at_narrow.set_window_size(800, SCREEN)  # a narrow window: tables scroll in their box, headers stay whole
    assert layout_faults(driver) == {"overlaps": [], "broken": []}
    assert js(driver, "return document.documentElement.scrollWidth <= window.innerWidth")


def test_the_layout_check_fails_on_a_page_planted_with_both_faults(driver, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body>"
        '<svg width="300" height="100"><text x="10" y="50">5.1385</text><text x="30" y="50">5.1390</text></svg>'
        '<table style="width:120px"><tr><th style="overflow-wrap:anywhere">pipeline</th>'
        '<th style="overflow-wrap:anywhere">failedfailedfailed episodes</th></tr></table>'
        "</body></html>"
    )
    open_page(driver, page)
    faults = layout_faults(driver)
    assert faults["overlaps"] == [["plot 0", "5.1385", "5.1390"]]
    assert ["header pipeline", "pipeline"] in faults["broken"] or any(
        w == "failedfailedfailed" for _, w in faults["broken"]
    )


def test_the_terminal_table_keeps_names_whole_at_80_columns():
    from rich.console import Console

    from atelier.runs.cli.run import summary_table

    long_names = ["rag-retrieval-bm25-k5-upfront", "rag-mem0-both-recall3-budget2000"]
    stats = {"n": 4, "mean": 4.5812, "ci95": [4.41, 4.752], "failed": 0}
    summary = {
        "dry_run": False,
        "systems": {n: {"errors": 0, "judges": {"pqr_personalization": stats}} for n in long_names},
    }
    console = Console(width=80, record=True, force_terminal=True, color_system=None)
    console.print(summary_table(summary))
    lines = console.export_text().splitlines()
    for name in long_names:
        assert any(name in line for line in lines), name  # on one line, not folded
    assert any("pqr_personalization" in line for line in lines)


def test_recipe_cost_piped_prints_model_and_role_names_whole(tmp_path):
    from typer.testing import CliRunner

    from atelier.runs.cli import app

    path = tmp_path / "r.toml"
    path.write_text(
        'name = "c"\n[benchmark]\nname = "sample"\nlimit = 2\n[[systems]]\nname = "s"\npipeline = "direct"\n'
        'memory = { backend = "none" }\n'
        '[[judges]]\nname = "pqr"\n'
    )
    result = CliRunner().invoke(app, ["recipe", "cost", str(path), "--model", "openai/gpt-4o-mini", "--sample", "1"])
    assert result.exit_code == 0, result.output
    assert "openai/gpt-4o-mini" in result.output and "pqr_fact_checker" in result.output and "…" not in result.output


# ----------------------------------------------------------------------------- costs that survive the cache


def test_a_rerun_from_the_cache_reports_the_first_runs_tokens_as_uncached(runs, driver):
    first, again = runs
    one, two = (json.loads((run / "summary.json").read_text()) for run in runs)
    for system in SYSTEMS:
        spent_first = one["systems"][system]["usage"]["calls"]["system"]
        spent_again = two["systems"][system]["usage"]["calls"]["system"]
        uncached_again = two["systems"][system]["usage"]["uncached"]["system"]
        assert spent_first["cache_hits"] == 0 < spent_first["prompt_tokens"]
        assert spent_again["prompt_tokens"] == spent_again["completion_tokens"] == 0  # every call from the cache
        assert uncached_again["cache_hit_share"] == 1.0
        assert (uncached_again["prompt_tokens"], uncached_again["completion_tokens"]) == (
            spent_first["prompt_tokens"],
            spent_first["completion_tokens"],
        )
    # the run's line: nothing spent, everything it asked priced as a first run would have paid
    assert two["ledger"]["prompt_tokens"] == 0 < two["ledger_uncached"]["prompt_tokens"]
    open_page(driver, again / "report.html")
    rows = {
        row.get_attribute("data-system"): [td.text for td in row.find_elements("tag name", "td")]
        for row in driver.find_elements("css selector", "table#systems tr[data-system]")
    }
    first_tokens = one["systems"]["rag-profile"]["usage"]["calls"]["system"]
    assert (
        rows["rag-profile"][7] == "0"
        and rows["rag-profile"][9] == f"{first_tokens['prompt_tokens'] + first_tokens['completion_tokens']:,}"
    )
    assert rows["rag-profile"][11] == "100%"
    note = driver.find_element("id", "cost-note").text
    assert (
        str(Path(json.loads((again / "config.json").read_text())["cache_dir"])) in note
        and "[cache] enabled = false" in note
    )


def test_a_memorys_ingest_is_counted_per_user_not_charged_to_an_episode(runs, driver):
    first, _ = runs
    from atelier.agents.models.ledger import read_ledger

    summary = json.loads((first / "summary.json").read_text())
    records = records_of(first)
    users = {r.case_id: r.user_id for r in records.values()}
    ingest = [e for e in read_ledger(first / "ledger.jsonl") if e.node == "ingest" and e.system == "rag-profile"]
    assert ingest and max(sum(e.case_id == c for e in ingest) for c in users) >= 3  # several calls per user
    memory = summary["systems"]["rag-profile"]["usage"]["memory"]
    per_user: dict[str, int] = {}
    for e in ingest:
        per_user[users[e.case_id]] = per_user.get(users[e.case_id], 0) + 1
    assert {u: m["spent"]["calls"] for u, m in memory["per_user"].items()} == per_user
    from atelier.runs.reading.usage import role_kind

    calls = summary["systems"]["rag-profile"]["usage"]["calls"]
    own = [
        e for e in read_ledger(first / "ledger.jsonl") if e.system == "rag-profile" and role_kind(e.role) == "system"
    ]
    assert calls["memory"]["calls"] == len(ingest) and calls["system"]["calls"] == len(own) - len(ingest)
    mine = [r for r in records.values() if r.system == "rag-profile"]
    assert all(r.ingest_s is not None for r in mine)
    for user, cost in memory["per_user"].items():
        assert cost["seconds"] == pytest.approx(max(r.ingest_s for r in mine if r.user_id == user), abs=1e-3)
    latency = summary["systems"]["rag-profile"]["usage"]["latency_s"]["mean"]
    assert latency == pytest.approx(sum(r.latency_s - r.ingest_s for r in mine) / len(mine), abs=1e-3)
    open_page(driver, first / "report.html")
    rows = driver.find_elements("css selector", "table#memory-ingest tr[data-system='rag-profile']")
    assert sorted(r.get_attribute("data-user") for r in rows) == sorted(per_user)


# ----------------------------------------------------------------------------- compare and view


def test_the_compare_page_filters_sorts_and_marks_a_rename_once(runs, driver, tmp_path):
    from selenium.webdriver.support.select import Select

    from atelier.runs.reading.compare import compare_runs, config_diff, write_comparison_html

    first, again = runs
    page = tmp_path / "compare.html"
    write_comparison_html(compare_runs([first, again], baseline=f"{first.name}:rag-bm25"), page)
    open_page(driver, page)
    assert layout_faults(driver)["overlaps"] == []
    Select(driver.find_element("css selector", "select[name=system]")).select_by_value(f"{first.name}:rag-profile")
    Select(driver.find_element("css selector", "select[name=sort]")).select_by_value("diff-desc")
    differences = _differences(first)
    shown = js(
        driver,
        "return Array.from(document.querySelectorAll('#case-rows tr.case-row')).filter(r => !r.hidden).map(r => r.dataset.case)",
    )
    assert shown == sorted(differences, key=lambda c: -differences[c])
    header = driver.find_elements("css selector", "#entries th.sortable")[-1]  # system cost: sorts on a click
    header.click()
    assert header.get_attribute("data-order") == "desc"

    config = json.loads((first / "config.json").read_text())
    renamed = json.loads(json.dumps(config))
    renamed["recipe"]["systems"][1]["name"] = "rag-profile-v2"
    differing = [row for row in config_diff([config, renamed])["rows"] if row["differs"]]
    assert [(row["key"], row["values"]) for row in differing] == [
        ("systems[rag-profile / rag-profile-v2].name", ["rag-profile", "rag-profile-v2"])
    ]


def test_the_view_groups_repeated_calls_into_one_row_that_opens(runs, driver):
    from atelier.runs.reading.view import write_static

    first, _ = runs
    index = write_static(first, first / "view")
    page = next(p for p in (index.parent / "episodes").glob("*rag-profile*.html"))
    open_page(driver, page)
    group = driver.find_element("css selector", "details.call-group[data-node='ingest']")
    calls = int(group.get_attribute("data-calls"))
    assert calls >= 3 and group.find_element("tag name", "summary").text.startswith(f"{calls} × memory · ingest")
    assert not group.find_element("css selector", ".call").is_displayed()
    group.find_element("tag name", "summary").click()
    assert len([c for c in group.find_elements("css selector", ".call") if c.is_displayed()]) == calls
    facts = driver.find_element("id", "facts").text
    assert f"{calls} of them the memory's ingest" in facts
    assert layout_faults(driver)["overlaps"] == []


# ----------------------------------------------------------------------------- the issue's own comparison


@pytest.mark.battery
def test_the_pdr_comparison_of_bm25_and_mem0_reads_in_two_screens_and_under_8000_px(driver, tmp_path, monkeypatch):
    """PDR-Bench's context setting over synthesized histories (`simulate history`), 4 cases: rag with
    BM25 retrieval against rag with mem0 (one model call per history event at ingest), judged by PQR
    over the Wikipedia-summary corpus, on the scripted model."""
    from typer.testing import CliRunner

    from atelier.runs.cli import app
    from atelier.runs.reading.view import write_static

    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))
    made = CliRunner().invoke(
        app, ["simulate", "history", "--benchmark", "pdr", "--limit", "2", "--out", str(tmp_path / "ctx"), "--no-check"]
    )
    assert made.exit_code == 0, made.output
    data = {
        "name": "pdr4",
        "benchmark": {
            "name": "pdr",
            "split": "subset150",
            "setting": "context",
            "limit": 4,
            "options": {"contexts_file": str(tmp_path / "ctx" / "contexts_en.jsonl"), "users": ["User1", "User2"]},
        },
        "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
        "judges": [{"name": "pqr"}],
        "web": {"sandbox": {"corpus": "wiki"}},
        "systems": [
            {
                "name": "rag-bm25",
                "pipeline": "rag",
                "memory": {"backend": "retrieval", "method": "bm25", "k": 5},
                "pipeline_options": {"max_queries": 2, "max_pages": 3},
            },
            {
                "name": "rag-mem0",
                "pipeline": "rag",
                "memory": {"backend": "mem0"},
                "pipeline_options": {"max_queries": 2, "max_pages": 3},
            },
        ],
        "run": {"out_dir": str(tmp_path)},
    }
    run = run_recipe(parse_recipe(data), tmp_path / "pdr4", progress=False).path
    open_page(driver, run / "report.html")
    assert js(driver, "return document.getElementById('cases').getBoundingClientRect().top + scrollY") <= 2 * SCREEN
    assert js(driver, "return document.documentElement.scrollHeight") < 8000
    js(driver, "document.querySelectorAll('details').forEach(d => d.open = true)")
    assert layout_faults(driver) == {"overlaps": [], "broken": []}
    summary = json.loads((run / "summary.json").read_text())
    memory = summary["systems"]["rag-mem0"]["usage"]["memory"]
    assert set(memory["per_user"]) == {"User1", "User2"} and all(
        m["spent"]["calls"] > 50 for m in memory["per_user"].values()
    )
    assert summary["systems"]["rag-mem0"]["usage"]["calls"]["system"]["calls"] < 20  # the episodes' own calls
    index = write_static(run, run / "view")
    first_ingest = max((index.parent / "episodes").glob("*rag-mem0*.html"), key=lambda p: p.stat().st_size)
    open_page(driver, first_ingest)
    assert js(driver, "return document.documentElement.scrollHeight") < 8000  # was 24,000 px with every call listed
    group = driver.find_element("css selector", "details.call-group[data-node='ingest']")
    assert int(group.get_attribute("data-calls")) > 50


def test_no_cache_asks_the_providers_again(tmp_path, cache_dir):
    data = {
        "name": "again",
        "benchmark": {"name": "tiny", "limit": 2},
        "systems": [{"name": "none", "memory": {"backend": "none"}}],
        "run": {"out_dir": str(tmp_path)},
    }
    first = run_recipe(parse_recipe(data), tmp_path / "first", progress=False)
    assert any((cache_dir / "llm").rglob("*"))  # its answers are in the shared cache now
    bypassed = run_recipe(parse_recipe(data).with_overrides(cache=False), tmp_path / "bypassed", progress=False)
    ledgers = [json.loads(f.summary.read_text())["ledger"] for f in (first, bypassed)]
    # the same requests again, every one sent to its provider (with the cache: every one a hit)
    assert ledgers[1]["cache_hits"] == 0 and ledgers[1]["provider_calls"] == ledgers[0]["calls"] > 0
    assert json.loads(bypassed.config.read_text())["cache_dir"] is None


@pytest.mark.battery
def test_the_screenshots_of_the_docs_are_made_by_their_script(tmp_path):
    import subprocess
    import sys

    from PIL import Image

    root = Path(__file__).resolve().parents[1]
    made = subprocess.run(
        [sys.executable, str(root / "docs" / "make_screenshots.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr
    shots = [Path(line) for line in made.stdout.splitlines()]
    assert [p.name for p in shots] == [p.name for p in sorted((root / "docs" / "img").glob("*.png"), key=shots_order)]
    for path in shots:
        image = Image.open(path).convert("L")
        low, high = image.getextrema()
        assert image.size[0] >= 1000 and high - low > 100, path  # a page was drawn, not a blank one


def shots_order(path: Path) -> int:
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location(
        "make_screenshots", Path(__file__).resolve().parents[1] / "docs" / "make_screenshots.py"
    )
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SHOTS.index(path.name)
