"""`atelier web serve|search|fetch` and `atelier bench web`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from atelier.runs.cli import app

FIXTURE_CORPUS = Path(__file__).parent / "fixtures" / "web" / "corpus"
ATELIER = [sys.executable, "-c", "from atelier.runs.cli import main; main()"]


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_serve_prints_its_base_url_and_serves_until_interrupted():
    process = subprocess.Popen(
        [*ATELIER, "web", "serve", "--corpus", str(FIXTURE_CORPUS), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        health = None
        for _ in range(100):  # the URL is printed just before serving starts
            try:
                health = httpx.get(f"{base_url}/healthz", timeout=1).json()
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert health == {**health, "status": "ok", "corpus": "corpus", "documents": 13, "ranker": "bm25"}
        results = httpx.get(f"{base_url}/search", params={"q": "meteor showers", "format": "json"}).json()["results"]
        assert results[0]["url"] == "https://night-sky.example/events/meteor-showers"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)


def test_a_bad_corpus_is_a_one_line_error_and_exit_code_2(tmp_path):
    result = subprocess.run(
        [*ATELIER, "web", "serve", "--corpus", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: corpus '{tmp_path / 'nowhere'}' is neither sample nor wiki nor a folder or .jsonl file"
    ]


def test_search_and_fetch_commands_print_json():
    results = invoke("web", "search", "barn owl hearing", "--corpus", str(FIXTURE_CORPUS), "-n", "2")
    assert 1 <= len(results) <= 2 and results[0]["url"] == "https://field-notes.example/birds/owl-hearing"
    page = invoke("web", "fetch", "https://field-notes.example/birds/owl-hearing", "--corpus", str(FIXTURE_CORPUS))
    assert page["title"] == "Barn owl hearing" and "facial disc" in page["text"]


def test_bench_web_reports_latency_and_throughput():
    report = invoke("bench", "web", "--corpus", str(FIXTURE_CORPUS), "--queries", "8", "--pages", "10")
    assert report["documents"] == 13
    latency = report["search"]["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["max"]
    assert report["search"]["queries"] >= 4
    assert report["search"]["title_query_top1"] == 1.0
    assert report["fetch_extract"]["pages"] == 10 and report["fetch_extract"]["pages_per_s"] > 0
    assert report["fetch_extract"]["empty_pages"] == 0
    assert set(report["targets"]) == {"search_p95_ms_max", "search_p95_met", "fetch_pages_per_s_min", "fetch_met"}
