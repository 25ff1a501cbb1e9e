"""One run per folder (issue 31, item 2): a second `atelier run` on a folder in use exits 2 at once
naming the holder's pid, the first ends with each key once; a lock left by a killed run is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atelier.runs.folder.lock import LOCK_NAME, RunFolderLock

ROOT = Path(__file__).resolve().parents[1]
RECIPE = """name = "lock"
[benchmark]
name = "sample"
limit = 4
[models.system]
model = "scripted?latency_ms=LATENCY_MS"
[models.judge]
model = "scripted"
[[systems]]
name = "direct-none"
memory = { backend = "none" }
[[systems]]
name = "direct-full"
memory = { backend = "full" }
[[judges]]
name = "lampqa_aspects"
[run]
concurrency = 1
"""


def start(tmp_path: Path, out: Path, latency_ms: int = 400) -> subprocess.Popen:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        RECIPE.replace("LATENCY_MS", str(latency_ms))
    )  # (latency is answer-neutral: a resume may change it)
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.Popen(
        [sys.executable, "-m", "atelier.runs.cli", "run", str(recipe), "--out", str(out), "--no-progress"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.battery  # two runs' processes on one folder
def test_a_second_run_on_a_folder_in_use_exits_2_at_once_and_the_first_counts_each_key_once(tmp_path):
    out = tmp_path / "run"
    first = start(tmp_path, out)
    try:
        wait_for(out / "config.json")
        started = time.monotonic()
        second = start(tmp_path, out)
        _, err = second.communicate(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        stdout, first_err = first.communicate(timeout=600)
    assert second.returncode == 2, err
    assert f"is in use by another atelier process (pid {first.pid})" in err and "Traceback" not in err
    assert "delete" not in err
    assert elapsed < 3  # the interpreter and the CLI start-up (~0.5 s idle): the refusal comes before any other work
    assert first.returncode == 0, first_err[-2000:]
    keys = [json.loads(line)["key"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 8


@pytest.mark.battery
def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    out = tmp_path / "run"
    first = start(tmp_path, out)
    wait_for(out / "config.json")
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert (out / LOCK_NAME).read_text().strip() == str(first.pid)  # the dead holder's pid is still written
    again = start(tmp_path, out, latency_ms=0)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    keys = [json.loads(line)["key"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(set(keys)) == sorted(keys) and len(keys) == 8


def test_the_lock_refuses_a_second_holder_in_the_same_process_too(tmp_path):
    import pytest

    from atelier.benchmarks.common.errors import ConfigError

    with RunFolderLock(tmp_path / "f"):
        with pytest.raises(ConfigError, match=f"pid {os.getpid()}"):
            with RunFolderLock(tmp_path / "f", "report"):
                pass
    with RunFolderLock(tmp_path / "f"):  # released: taken again
        pass


def test_the_current_directory_is_no_run_folder(tmp_path, capsys, monkeypatch):
    from tests.test_cli_errors import atelier, one_error_line

    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.replace("LATENCY_MS", "0"))
    for out in ("", "."):
        code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", out)
        assert code == 2 and "is the current directory" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.toml"]  # nothing written here
