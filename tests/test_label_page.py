"""`atelier label` (issue 45): the labelling page driven in a real browser — Debian's chromium,
headless, through chromium-driver and selenium. A labeller labels a few responses by keyboard,
reloads, goes on, changes a label; the file holds each label as given, and `atelier meta-eval
--labeller` gives the same agreement as the same labels entered through the CSV sheet."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from atelier.runs.cli import judges as judges_cli
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.studies.label_store import latest_labels
from atelier.runs.studies.labelling import serve_labelling
from tests.chromium import CHROMIUM, DRIVER, chrome
from tests.test_meta_eval_sheet import sheet_rows, write_rows

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None, reason="needs Debian's chromium and chromium-driver"
)

TOKEN = "label-test-token-0123456789"
SYSTEMS = ("sys-alpha", "sys-beta")
CRITERIA = ("need_alignment", "content_depth", "tone", "explanation_style")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Three sample cases x two systems judged by BESPOKE on the scripted model."""
    root = tmp_path_factory.mktemp("label")
    recipe = parse_recipe(
        {
            "name": "label",
            "benchmark": {"name": "sample", "limit": 3},
            "systems": [{"name": name, "memory": {"backend": "none"}} for name in SYSTEMS],
            "judges": [{"name": "bespoke"}],
            "run": {"out_dir": str(root)},
        }
    )
    return run_recipe(recipe, root / "run", progress=False).path


@pytest.fixture
def browser(tmp_path):
    driver = chrome(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(condition, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the page")


def press(driver, keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).get_attribute("textContent")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def label_response(driver, path: Path, ratings: str) -> None:
    """Rate the current response's criteria in order, waiting for each label to reach the file."""
    for rating in ratings:
        before = len(lines(path))
        press(driver, rating)
        wait_for(lambda expected=before + 1: len(lines(path)) == expected)
        wait_for(lambda: text(driver, "status").startswith("saved"))


def test_label_in_a_real_browser_reload_resume_and_agree_with_the_sheet(run_dir, browser, tmp_path) -> None:
    server, session, url = serve_labelling(run_dir, "bespoke", host="127.0.0.1", port=0, token=TOKEN, start=True)
    try:
        assert len(session.responses) == 6
        alice = run_dir / "labels" / "bespoke" / "alice.jsonl"

        browser.get(url)  # no labeller in the URL: the page asks for a name
        name = wait_for(
            lambda: browser.find_element("id", "labeller").is_displayed() and browser.find_element("id", "labeller")
        )
        name.send_keys("alice\n")
        wait_for(lambda: "1 of 6" in text(browser, "position"))
        # blind: no system name, case id or judge score anywhere on the page
        shown = browser.page_source
        assert not any(s in shown for s in SYSTEMS) and "sample" not in text(browser, "position")
        order = []
        for ratings in ("3425", "1255"):
            order.append(text(browser, "response"))
            label_response(browser, alice, ratings)
        wait_for(lambda: "3 of 6" in text(browser, "position"))
        assert "2 of 6 responses labelled" in text(browser, "progress")

        browser.refresh()  # resumes where alice stopped, with what she gave
        wait_for(lambda: text(browser, "status") == "resumed")
        assert "3 of 6" in text(browser, "position") and "labeller alice" in text(browser, "labeller-name")
        label_response(browser, alice, "4")  # one criterion of the third response
        press(browser, "p")  # back to the second response, whose first criterion alice changes
        wait_for(lambda: "2 of 6" in text(browser, "position"))
        assert text(browser, "response") == order[1]
        label_response(browser, alice, "2")

        given = lines(alice)
        assert len(given) == 10 and {g["labeller"] for g in given} == {"alice"}
        assert [g["rating"] for g in given] == [3, 4, 2, 5, 1, 2, 5, 5, 4, 2]
        assert all(g["scale"] == "1-5" and g["score"] == g["rating"] for g in given)
        latest = latest_labels(alice)
        assert len(latest) == 9  # the changed label replaced its earlier one
        assert {k[2] for k in latest} == set(CRITERIA) and {k[1] for k in latest} <= set(SYSTEMS)

        # a second labeller has a file, and an order, of their own
        browser.get(url + "&labeller=bob")
        wait_for(lambda: "labeller bob" in text(browser, "labeller-name"))
        assert session.order("bob") != session.order("alice")
        label_response(browser, run_dir / "labels" / "bespoke" / "bob.jsonl", "5")
        assert len(lines(alice)) == 10

        # sealed: no token, another Host, a cross-site Origin
        base = url.split("/?")[0]
        assert httpx.get(f"{base}/api/items?labeller=alice").status_code == 401
        assert httpx.get(f"{base}/", params={"token": TOKEN}, headers={"Host": "evil.example:80"}).status_code == 403
        refused = httpx.post(
            f"{base}/api/label",
            json={"labeller": "alice", "item": "x", "criterion": "tone", "rating": 3},
            headers={"X-Atelier-Token": TOKEN, "Origin": "http://evil.example"},
        )
        assert refused.status_code == 403
        bad = httpx.post(
            f"{base}/api/label",
            json={"labeller": "alice", "item": next(iter(session.responses)), "criterion": "tone", "rating": 9},
            headers={"X-Atelier-Token": TOKEN},
        )
        assert bad.status_code == 400 and "outside the scale 1-5" in bad.json()["error"]
        assert len(lines(alice)) == 10
    finally:
        server.stop()

    # the same labels through the CSV sheet give the same agreement
    app = typer.Typer()
    judges_cli.register(app, typer.Typer())
    sheet = tmp_path / "sheet.csv"
    assert (
        CliRunner()
        .invoke(app, ["meta-eval", "sheet", str(run_dir), "--judge", "bespoke", "--out", str(sheet)])
        .exit_code
        == 0
    )
    rows = sheet_rows(sheet)
    for row in rows:
        label = latest.get((row["case_id"], row["system"], row["criterion"]))
        row["label"] = str(label["rating"]) if label else ""
    filled = write_rows(tmp_path / "filled.csv", rows)
    from_page = CliRunner().invoke(app, ["meta-eval", str(run_dir), "--judge", "bespoke", "--labeller", "alice"])
    from_sheet = CliRunner().invoke(app, ["meta-eval", str(run_dir), "--judge", "bespoke", "--labels", str(filled)])
    assert from_page.exit_code == 0 and from_sheet.exit_code == 0, from_page.output + from_sheet.output
    page_report, sheet_report = (
        json.loads(from_page.stdout),
        json.loads(from_sheet.stdout),
    )  # the outcome line is on stderr
    for criterion in CRITERIA:
        a, b = page_report["criteria"][criterion], sheet_report["criteria"][criterion]
        assert (a["n"], a["pca"], a["mard"]) == (b["n"], b["pca"], b["mard"]), criterion
    assert page_report["average"] == sheet_report["average"]
    assert page_report["labels"]["matched"] == sheet_report["labels"]["matched"] == 9


def test_meta_eval_names_who_labelled_when_a_labeller_has_none(run_dir) -> None:
    app = typer.Typer()
    judges_cli.register(app, typer.Typer())
    done = CliRunner().invoke(app, ["meta-eval", str(run_dir), "--judge", "bespoke", "--labeller", "carol"])
    assert done.exit_code != 0
    assert "no labels by 'carol'" in str(done.exception)


def test_a_judge_with_no_rubric_scale_is_refused(tmp_path) -> None:
    recipe = parse_recipe(
        {
            "name": "nolabel",
            "benchmark": {"name": "sample", "limit": 1},
            "systems": [{"name": "a", "memory": {"backend": "none"}}],
            "judges": [{"name": "lampqa_direct"}],
            "run": {"out_dir": str(tmp_path)},
        }
    )
    run = run_recipe(recipe, tmp_path / "run", progress=False).path
    from atelier.benchmarks.common.errors import ConfigError

    with pytest.raises(ConfigError, match="has no rubric the labelling page knows"):
        serve_labelling(run, None, host="127.0.0.1", port=0, token=TOKEN)


def test_the_label_page_forbids_framing_and_sends_no_referrer(run_dir) -> None:
    """Issue 49, item 7: the page carries its token in its URL; like the view, every answer forbids
    framing (clickjacking the labels), loading anything from elsewhere, and leaking the URL as a referrer."""
    server, _, url = serve_labelling(run_dir, "bespoke", host="127.0.0.1", port=0, token=TOKEN, start=True)
    try:
        for answer in (httpx.get(url, timeout=10), httpx.get(url.split("?")[0], timeout=10)):  # a refusal too
            headers = answer.headers
            assert "frame-ancestors 'none'" in headers["content-security-policy"]
            assert "default-src 'none'" in headers["content-security-policy"]
            assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
    finally:
        server.stop()
