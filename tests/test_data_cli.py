"""`atelier data list|check` and `atelier bench data` through the real typer app."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from atelier.benchmarks.data_files import ENV_DATA_DIR, data_dir
from atelier.runs.cli import app

runner = CliRunner()


def test_data_list_shows_sources_and_benchmarks():
    result = runner.invoke(app, ["data", "list", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.output)
    assert listing["datasets"]["ikat"]["benchmarks"] == ["ikat"]
    files = {f["file"]: f for f in listing["datasets"]["pdr"]["files"]}
    assert files["pdr_bench/tasks_en.jsonl.gz"]["resolves"].startswith("data dir: ")
    assert "github" in files["pdr_bench/tasks_en.jsonl.gz"]["url"]


def test_data_check_one_data_set_prints_counts():
    result = runner.invoke(app, ["data", "check", "pdr"])
    assert result.exit_code == 0, result.output
    assert "pdr en: 50 tasks, 25 personas, 250 queries" in result.output
    assert "benchmark pdr split subset150 (setting persona): 150 cases" in result.output


def test_data_check_fails_on_a_corrupted_file(tmp_path, monkeypatch):
    copy = tmp_path / "data"
    shutil.copytree(data_dir() / "deep_research_bench", copy / "deep_research_bench")
    query = copy / "deep_research_bench" / "query.jsonl"
    query.write_text(query.read_text().replace('"language": "zh"', '"language": 7', 1))
    monkeypatch.setenv(ENV_DATA_DIR, str(copy))
    result = runner.invoke(app, ["data", "check", "drb"])
    assert result.exit_code == 2  # the data is at fault: bad input, not a bug (1)
    assert "FAIL  deep_research_bench/query.jsonl: " in result.output and "sha256 mismatch" in result.output
    assert "field 'language'" in result.output  # the benchmark load names the bad field too


def test_bench_data_prints_timings():
    result = runner.invoke(app, ["bench", "data", "--repeat", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["pdr_all_queries"]["cases"] == 250
    assert report["ikat_all_topics"]["cases"] == 95 + 332 + 218
    assert report["total_seconds_median"] > 0
