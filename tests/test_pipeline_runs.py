"""The pipelines through `atelier run`: the grid recipe (every pipeline x every memory backend) with
the scripted model and through the OpenAI-compatible stub, and a replayed web giving byte-identical
responses."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from atelier.graphs.pipelines import pipeline_names
from atelier.memory.registry import BACKENDS
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from tests.openai_stub import OpenAIStub

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "runs" / "recipes" / "pipelines.toml"
SMALL = {"max_researchers": 2, "max_rounds": 2, "max_pages": 2, "max_tool_calls": 4}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def atelier(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "atelier"), *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


def test_the_grid_recipe_pairs_every_pipeline_with_every_memory_backend():
    recipe = load_recipe(GRID)
    pairs = {(s.pipeline, s.memory["backend"]) for s in recipe.systems}
    # this project's pipelines; external agents have their own recipe (external_agents.toml, issue 17), and
    # research_api is a provider's model that researches (tests/test_research_api.py, issue 44)
    ours = [p for p in pipeline_names() if p not in ("external", "research_api")]
    assert pairs == set(itertools.product(ours, BACKENDS.names()))
    assert recipe.benchmark.name == "sample"


def _grid_ok(folder: Path, dry_run: bool) -> list[dict]:
    results = lines(folder / "results.jsonl")
    systems = {s.name for s in load_recipe(GRID).systems}
    assert {r["system"] for r in results} == systems
    failed = [(r["key"], r["error"]) for r in results if r["status"] != "ok"]
    assert not failed, failed
    assert all(r["dry_run"] is dry_run for r in results)
    ledger = lines(folder / "ledger.jsonl")
    assert all(e["node"] for e in ledger if e["role"] != "memory")
    fetched = {
        json.loads(line)["request"]["url"]
        for line in (folder / "web_log.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "fetch"
    }
    for r in results:
        response = r["response"]
        if r["system"].startswith(("rag-", "deep_research-")):
            assert "citations" in response["meta"]
            assert {c["url"] for c in response["citations"]} <= fetched  # cited pages were fetched
            if response["citations"]:
                listed = response["text"].split("## Sources\n", 1)[1].splitlines()
                assert len(listed) == len(response["citations"])
    return results


def _exit_code_says_what_degraded(done, folder) -> dict[str, int]:
    """Exit 0 exactly when no step of any episode degraded, else 3 with the counts by kind printed
    as results.jsonl holds them (a scripted or stub writer may cite numbers it was never shown, a
    researcher may take no notes: honest runs say so)."""
    kinds: dict[str, int] = {}
    for record in lines(folder / "results.jsonl"):
        for d in record["degraded"]:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + d["count"]
    assert done.returncode == (3 if kinds else 0), done.stderr[-3000:]
    if kinds:
        printed = next(line for line in done.stderr.splitlines() if line.startswith("degraded: "))
        assert printed.endswith("(by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")"), printed
    return kinds


@pytest.mark.battery
def test_every_pipeline_with_every_backend_runs_through_atelier_run_on_the_scripted_model(tmp_path, cache_dir):
    done = atelier("run", str(GRID), "--limit", "1", "--out", str(tmp_path / "grid"))
    _exit_code_says_what_degraded(done, tmp_path / "grid")
    _grid_ok(tmp_path / "grid", dry_run=True)


@pytest.mark.battery
def test_every_pipeline_with_every_backend_runs_through_the_openai_compatible_stub(tmp_path, cache_dir):
    with OpenAIStub() as stub:
        done = atelier(
            "run",
            str(GRID),
            "--limit",
            "1",
            "--out",
            str(tmp_path / "grid"),
            "--model",
            "openai/stub-model",
            "--api-base",
            stub.base_url,
            "--api-key",
            "sk-test",
        )
        _exit_code_says_what_degraded(done, tmp_path / "grid")
        assert len(stub.requests) > 100
    results = _grid_ok(tmp_path / "grid", dry_run=False)
    assert all(not r["response"]["text"].startswith("DRY RUN") for r in results)
    assert {e["model"] for e in lines(tmp_path / "grid" / "ledger.jsonl")} == {"openai/stub-model"}


def _recipe(tmp_path, name: str, web: dict) -> object:
    return parse_recipe(
        {
            "name": name,
            "seed": 0,
            "benchmark": {"name": "sample", "limit": 2},
            "systems": [
                {"name": "rag-full", "pipeline": "rag", "memory": {"backend": "full"}},
                {
                    "name": "deep-none",
                    "pipeline": "deep_research",
                    "memory": {"backend": "none"},
                    "pipeline_options": SMALL,
                },
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"enabled": False},  # every answer recomputed: only the web is replayed
            "web": web,
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


def test_replaying_a_runs_recorded_web_gives_byte_identical_responses(tmp_path, cache_dir):
    recorded = run_recipe(_recipe(tmp_path, "record", {}), progress=False)
    replayed = run_recipe(
        _recipe(tmp_path, "replay", {"mode": "replay", "cache_dir": str(recorded.path / "web")}), progress=False
    )
    first, second = lines(recorded.results), lines(replayed.results)
    assert all(r["status"] == "ok" for r in first + second)
    by_key = lambda rs: {r["key"]: json.dumps(r["response"], ensure_ascii=False).encode() for r in rs}
    assert by_key(first) == by_key(second) and len(by_key(first)) == 4  # text, citations (with sha256s), meta
    assert any(json.loads(v)["citations"] for v in by_key(first).values())
    log = lines(replayed.path / "web_log.jsonl")
    assert log and all(e["from_cache"] for e in log) and {e["kind"] for e in log} == {"search", "fetch"}


def test_checkpoints_hold_references_not_page_texts_or_histories(tmp_path, cache_dir):
    folder = run_recipe(_recipe(tmp_path, "small", {}), progress=False)
    store = folder.path / "sources"
    texts = [p.read_text(encoding="utf-8") for p in store.glob("*/*.txt")]
    assert texts
    with sqlite3.connect(folder.checkpoints) as db:
        blobs = [row[0] for row in db.execute("select checkpoint from checkpoints")]
        blobs += [row[0] for row in db.execute("select value from writes") if row[0]]
    for text in texts:
        probe = text[200:260].encode("utf-8")
        assert not any(probe in blob for blob in blobs)
    history_line = "Trying to keep everything else under"  # from a sample user's history, never in state
    assert not any(history_line.encode() in blob for blob in blobs)
