"""The CLI as a user runs it: the quickstart twice (the second from the cache), a real HTTP model
(the stub server), and `recipe check` on a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.openai_stub import OpenAIStub

ROOT = Path(__file__).resolve().parent.parent
ATELIER = [sys.executable, "-m", "atelier.runs.cli"]


def atelier(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*ATELIER, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.battery
def test_quickstart_twice_second_run_all_cache_hits(tmp_path, env):
    runs = []
    for name in ("first", "second"):
        done = atelier(
            "run",
            "runs/recipes/quickstart.toml",
            "--model",
            "scripted",
            "--no-progress",
            "--out",
            str(tmp_path / name),
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == str(tmp_path / name)  # the run folder, last
        runs.append(tmp_path / name)
    first, second = runs
    summary = json.loads((first / "summary.json").read_text())
    assert set(summary["systems"]) == {"direct-none", "direct-full"}
    assert (first / "report.html").read_text().startswith("<!doctype html>")
    # checkpoints of the sample suite: at most 100 KB per episode on disk
    episodes = len(lines(first / "results.jsonl"))
    assert (first / "checkpoints.sqlite").stat().st_size / episodes <= 100_000
    # the first run asks the provider (tasks shared by several users may hit within the run)
    assert sum(not e["cache_hit"] for e in lines(first / "ledger.jsonl")) > len(lines(first / "results.jsonl"))
    ledger = lines(second / "ledger.jsonl")
    assert ledger and all(e["cache_hit"] for e in ledger)  # zero provider calls
    scores = lambda folder: {r["key"]: r["scores"] for r in lines(folder / "results.jsonl")}
    assert scores(first) == scores(second)


def test_quickstart_through_litellm_http_path(tmp_path, env):
    with OpenAIStub() as stub:
        done = atelier(
            "run",
            "runs/recipes/quickstart.toml",
            "--model",
            "openai/gpt-4o-mini",
            "--api-base",
            stub.base_url,
            "--api-key",
            "sk-stub",
            "--limit",
            "2",
            "--no-progress",
            "--out",
            str(tmp_path / "http"),
            env=env,
        )
        assert done.returncode == 0, done.stderr
        requests = list(stub.requests)
    ledger = lines(tmp_path / "http" / "ledger.jsonl")
    assert len(ledger) == len(requests) > 0
    assert all(e["model"] == "openai/gpt-4o-mini" and not e["dry_run"] and not e["cache_hit"] for e in ledger)
    served = sorted(sum(len(str(m["content"]).split()) for m in r["body"]["messages"]) for r in requests)
    assert sorted(e["prompt_tokens"] for e in ledger) == served  # the tokens the server reported
    assert all(e["cost_usd"] > 0 for e in ledger)
    summary = json.loads((tmp_path / "http" / "summary.json").read_text())
    assert summary["dry_run"] is False and summary["ledger"]["provider_calls"] == len(requests)


def test_recipe_check_names_the_typo(tmp_path, env):
    text = (ROOT / "runs/recipes/quickstart.toml").read_text().replace('backend = "full"', 'backend = "fulll"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    done = atelier("recipe", "check", str(bad), env=env)
    assert done.returncode == 2
    assert "systems[1].memory.backend: unknown memory backend 'fulll'; valid: " in done.stderr
    assert "none" in done.stderr and "Traceback" not in done.stderr
    ok = atelier("recipe", "check", "runs/recipes/quickstart.toml", env=env)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
