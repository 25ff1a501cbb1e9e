"""`atelier data fetch NAME` and `atelier data check NAME --option KEY=VALUE`: a release is fetched
from its upstream only checksummed, offline (or with no checksum registered) one line says where to
get it, and a user's own download can be checked."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atelier.benchmarks import data_files
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.data_fetch import RELEASES, Release, fetch, where_to_get
from atelier.benchmarks.data_files import DataFile
from atelier.runs.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ATELIER = [sys.executable, "-c", "from atelier.runs.cli import main; main()"]
RELEASE_BYTES = b'{"id": 1, "text": "the real release"}\n'


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """An upstream on loopback: `good.jsonl` is the release, `tampered.jsonl` is not."""
    root = tmp_path_factory.mktemp("upstream")
    (root / "good.jsonl").write_bytes(RELEASE_BYTES)
    (root / "tampered.jsonl").write_bytes(RELEASE_BYTES.replace(b"real", b"fake"))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def test_release(monkeypatch, tmp_path, upstream):
    """A data set `testset` of one registered file served by `upstream` (a loopback address the
    download guard refuses unless allowed: allowed here), with empty data and cache dirs."""
    from atelier.benchmarks import download

    monkeypatch.setattr(download, "fetch_checked", functools.partial(download.fetch_checked, allow=[upstream[7:]]))
    monkeypatch.setenv(data_files.ENV_DATA_DIR, str(tmp_path / "data"))
    monkeypatch.setenv(data_files.ENV_CACHE_DIR, str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    monkeypatch.setitem(
        RELEASES, "testset", Release(name="testset", title="Test Set", upstream="https://example.org/testset")
    )

    def register(name: str) -> DataFile:
        entry = DataFile(
            relpath="testset/records.jsonl",
            url=f"{upstream}/{name}",
            sha256=sha(RELEASE_BYTES),
            dataset="testset",
            upstream_bytes=len(RELEASE_BYTES),
        )
        monkeypatch.setitem(data_files._FILES, entry.relpath, entry)
        return entry

    return register


def test_fetch_gets_the_release_checked_into_the_cache_then_keeps_it(test_release, tmp_path):
    test_release("good.jsonl")
    [first] = fetch("testset")
    assert first.how == "fetched"
    assert Path(first.path) == tmp_path / "cache" / "data" / "testset" / "records.jsonl"
    assert Path(first.path).read_bytes() == RELEASE_BYTES
    [again] = fetch("testset")
    assert again.how == "present" and again.path == first.path


def test_fetch_refuses_a_file_whose_checksum_is_wrong_and_saves_nothing(test_release, tmp_path):
    test_release("tampered.jsonl")
    with pytest.raises(DataError) as info:
        fetch("testset")
    message = str(info.value)
    assert "sha256 mismatch" in message and "not saved" in message
    assert "https://example.org/testset" in message and "\n" not in message
    assert not (tmp_path / "cache" / "data" / "testset" / "records.jsonl").exists()


def test_fetch_refuses_a_damaged_copy_in_the_users_data_dir_and_leaves_it(test_release, tmp_path):
    test_release("good.jsonl")
    damaged = tmp_path / "data" / "testset" / "records.jsonl"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not the release\n")
    with pytest.raises(DataError, match="not the release: replace it"):
        fetch("testset")
    assert damaged.read_bytes() == b"not the release\n"


def test_a_release_with_no_registered_checksum_is_never_downloaded_and_says_where_to_get_it(monkeypatch):
    def no_download(entry, dest):  # pragma: no cover - must not be called
        raise AssertionError("downloaded an unverifiable release")

    with pytest.raises(DataError) as info:
        fetch("bespoke", download=no_download)
    message = str(info.value)
    assert "https://huggingface.co/datasets/yonsei-dli/BESPOKE" in message
    assert "atelier data check bespoke --option data_dir=PATH" in message and "\n" not in message


def test_fetch_of_an_unknown_data_set_names_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown data set 'nope'; valid: bespoke, drb"):
        fetch("nope")


def test_every_benchmark_data_set_has_a_release():
    registered = {f.dataset for f in data_files.registered_files() if f.url}
    assert registered <= set(RELEASES)
    assert "huggingface.co/datasets/alireza7/LaMP-QA" in where_to_get("lampqa", "data_file")
    assert "atelier simulate history" in where_to_get("pdr", "contexts_file")


def test_offline_the_cli_prints_one_line_saying_where_to_get_it_and_exits_non_zero(tmp_path):
    # offline for sure: an empty data dir and cache, and every HTTP(S) request sent to a closed port
    env = {
        **os.environ,
        data_files.ENV_DATA_DIR: str(tmp_path / "data"),
        data_files.ENV_CACHE_DIR: str(tmp_path / "cache"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    (tmp_path / "data").mkdir()
    done = subprocess.run([*ATELIER, "data", "fetch", "locomo"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: locomo/locomo10.json: download of https://raw.githubusercontent.com/")
    assert "get LoCoMo from https://github.com/snap-research/locomo" in lines[0]
    assert "$ATELIER_DATA_DIR/locomo/locomo10.json" in lines[0]
    assert not (tmp_path / "cache" / "data" / "locomo" / "locomo10.json").exists()


def test_data_check_option_checks_a_users_own_download():
    ok = CliRunner().invoke(app, ["data", "check", "bespoke", "--option", f"data_dir={FIXTURES / 'bespoke'}"])
    assert ok.exit_code == 0, ok.output
    assert "ok    benchmark bespoke split all" in ok.output and "0 failed" in ok.output


def test_data_check_option_fails_on_a_download_that_is_not_there(tmp_path):
    missing = tmp_path / "no-such-download"
    failed = CliRunner().invoke(app, ["data", "check", "bespoke", "--option", f"data_dir={missing}"])
    assert failed.exit_code == 2
    assert f"FAIL  benchmark bespoke split all: option data_dir={missing} is not a directory" in failed.output


def test_data_check_without_option_says_where_the_data_comes_from():
    skipped = CliRunner().invoke(app, ["data", "check", "lampqa"])
    assert skipped.exit_code == 0
    assert "--option KEY=PATH" in skipped.output and "huggingface.co/datasets/alireza7/LaMP-QA" in skipped.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bespoke", "--option", "dir=/x"], "--option dir: unknown option (benchmark bespoke)"),
        (["bespoke", "--option", "data_dir"], "expected KEY=VALUE"),
        (["--option", "data_dir=/x"], "--option needs a benchmark NAME"),
        (["pdr", "--option", "language=fr"], "--option language:"),
    ],
)
def test_data_check_option_refuses_bad_input_in_one_line(args, message):
    done = subprocess.run([*ATELIER, "data", "check", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_cli_registers_fetch():
    shown = CliRunner().invoke(app, ["data", "--help"])
    assert "fetch" in shown.output
