"""A run killed or interrupted midway, as a user would do it: `kill -9` then resume, Ctrl-C or SIGTERM
then the printed resume command; and a faulty model, where every episode must end scored or failed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ATELIER = [sys.executable, "-m", "atelier.runs.cli"]
SLOW_MODEL = "scripted?latency_ms=150"


def lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line torn by kill -9
            continue
    return out


def _default_sigint() -> None:
    # as in a terminal: a suite started in the background (bash without job control) hands its
    # children SIGINT ignored, and Python then never raises KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], cache: Path) -> subprocess.Popen:
    env = {**os.environ, "ATELIER_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [*ATELIER, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def wait_for_results(folder: Path, at_least: int, process: subprocess.Popen, timeout: float = 120) -> None:
    results = folder / "results.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if results.exists() and len(lines(results)) >= at_least:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} results in {timeout} s")


def run_args(out: Path, model: str = SLOW_MODEL) -> list[str]:
    return [
        "run",
        "runs/recipes/quickstart.toml",
        "--model",
        model,
        "--limit",
        "3",
        "--concurrency",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]


@pytest.mark.battery
def test_kill_9_midway_then_resume_equals_an_uninterrupted_run(tmp_path):
    whole = start(run_args(tmp_path / "whole"), tmp_path / "cache-whole")
    killed = start(run_args(tmp_path / "killed"), tmp_path / "cache-killed")
    wait_for_results(tmp_path / "killed", 2, killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert len(lines(tmp_path / "killed" / "results.jsonl")) < 6  # it really stopped midway

    resumed = start(run_args(tmp_path / "killed"), tmp_path / "cache-killed")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "episodes already done" in err
    assert whole.wait(timeout=300) == 0

    def final(folder: Path) -> dict[str, dict]:
        latest = {}
        for record in lines(folder / "results.jsonl"):
            latest[record["key"]] = record
        return latest

    a, b = final(tmp_path / "whole"), final(tmp_path / "killed")
    assert sorted(a) == sorted(b) and len(a) == 6
    assert {k: r["scores"] for k, r in a.items()} == {k: r["scores"] for k, r in b.items()}
    assert {k: r["response"] for k, r in a.items()} == {k: r["response"] for k, r in b.items()}
    provider_calls = [
        e["request_key"]
        for e in lines(tmp_path / "killed" / "ledger.jsonl")
        if not e["cache_hit"] and e["status"] == "ok"
    ]
    assert len(provider_calls) == len(set(provider_calls))  # no provider call made twice


@pytest.mark.battery
def test_ctrl_c_prints_how_to_resume_and_the_printed_command_finishes_the_run(tmp_path):
    folder = tmp_path / "run"
    process = start(run_args(folder), tmp_path / "cache")
    wait_for_results(folder, 1, process)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err
    command = next(line for line in err.splitlines() if line.startswith("resume with: atelier "))
    args = shlex.split(command.removeprefix("resume with: atelier "))
    assert args[args.index("--out") + 1] == str(folder)

    resumed = start(args, tmp_path / "cache")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "episodes: 6 scored, 0 failed (of 6)" in err


@pytest.mark.battery
def test_sigterm_ends_a_run_as_ctrl_c_does_with_its_own_exit_code_and_the_resume_command(tmp_path):
    """A `kill`, a supervisor or a scheduler stops a run with SIGTERM: what finished is kept, the
    resume command printed, and the exit code is 143 (128 + SIGTERM) so a script can tell it from Ctrl-C."""
    folder = tmp_path / "run"
    process = start(run_args(folder), tmp_path / "cache")
    wait_for_results(folder, 1, process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "terminated (SIGTERM):" in err and "Traceback" not in err
    kept = {record["key"] for record in lines(folder / "results.jsonl") if record["status"] == "ok"}
    assert 1 <= len(kept) < 6 and f"{len(kept)} of 6 episodes are done" in err
    command = next(line for line in err.splitlines() if line.startswith("resume with: atelier "))
    args = shlex.split(command.removeprefix("resume with: atelier "))
    assert args[args.index("--out") + 1] == str(folder)

    resumed = start(args, tmp_path / "cache")  # the folder was let go: the printed command takes it
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"{len(kept)} of 6 episodes already done" in err and "episodes: 6 scored, 0 failed (of 6)" in err


@pytest.mark.battery  # the whole quickstart on a faulty model
@pytest.mark.slow
def test_a_faulty_model_leaves_no_episode_unaccounted_for(tmp_path):
    recipe = (ROOT / "runs/recipes/quickstart.toml").read_text()
    recipe = recipe.replace(
        'model = "scripted"', 'model = "scripted?error_rate=0.1&malformed_rate=0.05"\nmax_retries = 0'
    )
    path = tmp_path / "faulty.toml"
    path.write_text(recipe)
    process = start(["run", str(path), "--no-progress", "--out", str(tmp_path / "run")], tmp_path / "cache")
    _, err = process.communicate(timeout=600)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    episodes = summary["episodes"]
    latest = {}
    for record in lines(tmp_path / "run" / "results.jsonl"):
        latest[record["key"]] = record
    assert len(latest) == episodes["expected"] == 16 and episodes["missing"] == 0
    for (
        record
    ) in latest.values():  # every episode ended scored, unscored with the judge's reason, or failed with its own
        if record["status"] == "ok":
            judgment = record["judgments"][0]
            assert judgment["score"] is not None or judgment["error"]
        else:
            assert record["error"]
    assert episodes["scored"] + episodes["unscored"] + episodes["failed"] == 16
    assert episodes["failed"] + episodes["unscored"] > 0  # 10% of ~100 calls failed with no retries
    assert process.returncode == 3, err  # finished, with failures
    assert "failed (of 16)" in err
