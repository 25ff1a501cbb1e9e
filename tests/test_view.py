"""`atelier view`: a run's episodes in a real browser (headless Chromium). The index names every case
and its filters (held in the URL) hide what they should; an episode's page shows its steps on a
timeline with a lane per graph — one per parallel researcher — and each model call with the
ledger's tokens, latency and cache hit, the state changes and the judge's details. The server
serves the same pages; a folder that is no run is one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from atelier.runs.reading.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return CHROMIUM


def render(url: str, screenshot: Path | None = None):
    """The DOM after Chromium loaded the page and ran its script (and, optionally, a screenshot)."""
    import lxml.html

    base = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    if screenshot is not None:
        subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
        from PIL import Image

        image = Image.open(screenshot).convert("L")
        low, high = image.getextrema()  # one band (L): two numbers
        assert isinstance(low, int | float) and isinstance(high, int | float)
        assert image.size == (1400, 2000) and high - low > 100  # something was drawn, not a blank page
    return lxml.html.fromstring(dom)


def atelier(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def text(node) -> str:
    return " ".join(node.text_content().split())


def visible(doc) -> list[tuple[str, str]]:
    return [
        (tr.get("data-case"), tr.get("data-system"))
        for tr in doc.xpath('//tr[@class="episode"]')
        if tr.get("hidden") is None
    ]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quickstart on the scripted model, one case, and its view written with --static."""
    tmp = tmp_path_factory.mktemp("view")
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp / "cache")}
    run = tmp / "quickstart"
    done = atelier("run", "runs/recipes/quickstart.toml", "--limit", "1", "--no-progress", "--out", str(run), env=env)
    assert done.returncode == 0, done.stderr
    done = atelier("view", str(run), "--static", str(run / "view"), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "view" / "index.html")
    return run, env


def test_the_index_names_every_case_and_its_filters_work_in_the_browser(quickstart, tmp_path):
    run, _ = quickstart
    config = json.loads((run / "config.json").read_text())
    records = ResultsFile(run / "results.jsonl").load()
    index = run / "view" / "index.html"
    doc = render(index.as_uri(), screenshot=tmp_path / "index.png")

    systems = ["direct-none", "direct-full"]
    expected = [(case, system) for case in config["cases"] for system in systems]
    assert len(expected) == 2 and visible(doc) == expected  # unfiltered: every episode is shown
    for case in config["cases"]:
        assert case in text(doc.xpath('//table[@id="episodes"]')[0])
    rows = {(tr.get("data-case"), tr.get("data-system")): tr for tr in doc.xpath('//tr[@class="episode"]')}
    for record in records.values():
        cells = [text(td) for td in rows[(record.case_id, record.system)].xpath("./td")]
        assert cells[:4] == [record.case_id, record.system, "ok", f"{record.scores['lampqa_aspects']:.3f}"]
    assert text(doc.xpath('//*[@id="shown"]')[0]) == "2"
    assert doc.xpath('//a[@id="report-link"]/@href') == ["../report.html"]

    # a filter in the URL's query: one system
    doc = render(index.as_uri() + "?system=direct-none")
    assert visible(doc) == [(config["cases"][0], "direct-none")]
    assert text(doc.xpath('//*[@id="shown"]')[0]) == "1"
    assert doc.xpath('//p[@id="no-match"][@hidden]')  # "no episode matches" stays hidden

    # a filter in the hash (what the page's own controls write): the other system
    doc = render(index.as_uri() + "#system=direct-full&judge=&min=&max=&degraded=&status=")
    assert visible(doc) == [(config["cases"][0], "direct-full")]

    # score bounds on one judge: above every score hides every episode, and says so
    scores = sorted(float(r.scores["lampqa_aspects"] or 0.0) for r in records.values())
    assert all(r.scores["lampqa_aspects"] is not None for r in records.values())
    doc = render(index.as_uri() + f"?judge=lampqa_aspects&min={scores[-1] + 0.001}")
    assert visible(doc) == [] and not doc.xpath('//p[@id="no-match"][@hidden]')
    doc = render(index.as_uri() + f"?judge=lampqa_aspects&min={scores[0]}&max={scores[-1]}")
    assert len(visible(doc)) == 2
    doc = render(index.as_uri() + "?judge=pqr")  # a judge this run never ran
    assert visible(doc) == []

    # degraded kinds: nothing degraded in this run
    doc = render(index.as_uri() + "?degraded=any")
    assert visible(doc) == []
    doc = render(index.as_uri() + "?degraded=none&status=ok")
    assert len(visible(doc)) == 2


def test_an_episode_page_shows_the_timeline_the_calls_and_the_judge(quickstart, tmp_path):
    run, _ = quickstart
    index = run / "view" / "index.html"
    doc = render(index.as_uri())
    link = doc.xpath('//tr[@data-system="direct-full"]/td[1]/a/@href')
    assert len(link) == 1
    page = render((index.parent / link[0]).as_uri(), screenshot=tmp_path / "episode.png")
    case = doc.xpath('//tr[@data-system="direct-full"]/@data-case')[0]

    assert text(page.xpath('//*[@id="case"]')[0]) == case and text(page.xpath('//*[@id="system"]')[0]) == "direct-full"

    # the timeline: a lane per graph, each step and each call on it
    lanes = page.xpath('//div[@id="timeline"]/div[@class="lane"]/@data-lane')
    assert lanes == ["episode", "episode › judge"]
    steps = load_trace(run, case, "direct-full")
    assert len(page.xpath('//div[@id="timeline"]//a[contains(@class, "step")]')) == len(steps)
    for bar in page.xpath('//div[@id="timeline"]//a[contains(@class, "bar")]'):
        style = {
            name.strip(): value
            for name, value in (
                part.split(":") for part in bar.get("style").replace("%", "").split(";") if part.strip()
            )
        }
        left, width = float(style["left"]), float(style["width"])
        assert 0 <= left and left + width <= 100.001

    # every model call of the episode, with the ledger's figures, its prompt and its answer
    ledger = [json.loads(line) for line in (run / "ledger.jsonl").read_text().splitlines()]
    mine = [e for e in ledger if e["case_id"] == case and e["system"] == "direct-full" and e["kind"] != "tool"]
    calls = {div.get("id").removeprefix("call-"): div for div in page.xpath('//div[starts-with(@id, "call-")]')}
    assert len(mine) >= 2 and set(calls) == {e["call_id"] for e in mine}
    for e in mine:
        div = calls[e["call_id"]]
        assert text(div.xpath('.//span[contains(@class, "tokens")]')[0]) == (
            f"{e['prompt_tokens']}+{e['completion_tokens']} tokens"
        )
        assert text(div.xpath('.//span[contains(@class, "latency")]')[0]) == f"{e['latency_ms']:.0f} ms"
        assert text(div.xpath('.//span[contains(@class, "cache")]')[0]) == (
            "cache hit" if e["cache_hit"] else "provider"
        )
        assert div.xpath('.//details[@class="prompt"]//pre')  # the prompt, from the response cache
        assert text(div.xpath('.//div[@class="answer"]/pre')[0])
    assert len(page.xpath('//div[@id="timeline"]//a[contains(@class, "call")]')) == len(mine)
    # the system's answer call is on the episode's lane, the judge's on the judge's
    direct = next(e for e in mine if e["node"] == "direct")
    card = page.xpath(f'//div[@id="call-{direct["call_id"]}"]/ancestor::div[@class="step-card"]')[0]
    assert card.get("data-lane") == "episode" and "direct" in text(card.xpath("./h3")[0])

    # the state change per step, and the judge's details
    recall = page.xpath('//div[@class="step-card"][h3[contains(., "recall")]]')[0]
    assert "user_context" in text(recall.xpath('.//details[@class="changed"]/summary')[0])
    record = ResultsFile(run / "results.jsonl").load()[f"{case}::direct-full"]
    judgment = page.xpath('//div[@data-judge="lampqa_aspects"]')[0]
    score = record.scores["lampqa_aspects"]
    assert text(judgment.xpath(".//details[@class='judgment']/summary")[0]).startswith(f"lampqa_aspects {score:.3g}")
    reasoning = text(judgment.xpath(".//div[@class='reasoning']")[0])  # the aspects as prose, open on this page
    for aspect in record.judgments[0].details["aspects"]:
        assert f"{aspect['match_score']}/2 {aspect['aspect']}" in reasoning
    details = json.loads(judgment.xpath('.//details[@class="judge-details"]/pre')[0].text_content())
    assert details == record.judgments[0].details


def test_parallel_researchers_get_a_lane_each(tmp_path, cache_dir):
    from atelier.runs.reading.view import RunViewData

    recipe = parse_recipe(
        {
            "name": "view-deep-research",
            "benchmark": {"name": "sample", "split": "all", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": "dr",
                    "pipeline": "deep_research",
                    "memory": {"backend": "none"},
                    "pipeline_options": {"max_researchers": 2, "max_rounds": 1, "max_pages": 1, "max_tool_calls": 2},
                }
            ],
            "judges": [],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    data = RunViewData(folder.path)
    (row,) = data.run_view().episodes
    episode = data.episode(row)
    researchers = [lane for lane in episode.lanes if "researcher" in lane]
    assert researchers == ["episode › deep_research › researcher #1", "episode › deep_research › researcher #2"]
    for lane in researchers:  # each researcher's own steps, from its input to its last node
        nodes = [n for s in episode.steps if s.lane == lane for n in s.nodes]
        assert nodes[0] == "(input)" and "search" in nodes
    ids = [c.call_id for s in episode.steps for c in s.calls]
    assert len(ids) == len(set(ids)) == sum(1 for e in data.ledger if e.is_model_call)  # each call shown once


def test_the_server_serves_the_same_pages(quickstart):
    from starlette.testclient import TestClient

    from atelier.runs.reading.view_server import view_app

    run, _ = quickstart
    client = TestClient(view_app(run, hosts=None))
    index = client.get("/index.html")
    assert index.status_code == 200 and index.text.count('class="episode"') == 2
    written = (run / "view" / "index.html").read_text()
    assert index.text.replace('href="report.html"', 'href="../report.html"') == written
    for page in sorted((run / "view" / "episodes").iterdir()):
        served = client.get(f"/episodes/{page.name}")
        assert served.status_code == 200 and "timeline" in served.text
    assert client.get("/episodes/no-such-episode.html").status_code == 404
    assert client.get("/report.html").status_code == 200


def test_a_folder_that_is_no_run_is_one_line_and_exit_2(quickstart, tmp_path):
    run, env = quickstart
    done = atelier("view", str(tmp_path / "missing"), "--static", str(tmp_path / "v"), env=env)
    assert done.returncode == 2 and done.stderr.strip() == f"error: {tmp_path / 'missing'}: no such run folder"
    (tmp_path / "empty").mkdir()
    done = atelier("view", str(tmp_path / "empty"), "--static", str(tmp_path / "v"), env=env)
    assert done.returncode == 2 and "is not a run folder (no config.json)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = atelier("view", str(run), "--static", str(run / "config.json"), env=env)
    assert done.returncode == 2 and "exists and is not a folder" in done.stderr
    assert not (tmp_path / "v").exists()
