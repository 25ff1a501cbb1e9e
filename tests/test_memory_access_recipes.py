"""The shipped memory-access grids (runs/recipes/memory_access.toml on the sample suite and
memory_access_pdr.toml on PDR-Bench Task w/Context) run on the scripted model: every episode
scored, and every `tool` / `both` system recalls through `recall_memory` (ledger lines) while no
`upfront` system does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from atelier.runs.folder.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "runs" / "recipes" / "memory_access.toml"
PDR = ROOT / "runs" / "recipes" / "memory_access_pdr.toml"


def atelier(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=1500
    )


def recalls(folder: Path) -> Counter:
    entries = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines() if line.strip()]
    return Counter(e["system"] for e in entries if e.get("kind") == "tool" and e.get("node") == "recall_memory")


def degraded(folder: Path) -> str:
    """What degraded in the run in `folder`, episode by episode: said when its exit code is not 0."""
    path = folder / "results.jsonl"
    results = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return "\n".join(f"{r['system']} {r['case_id']}: {r['degraded']}" for r in results if r.get("degraded"))


def test_the_pdr_grid_is_the_sample_grid_on_pdr_with_context():
    sample, pdr = load_recipe(SAMPLE), load_recipe(PDR)
    assert [s.model_dump() for s in pdr.systems] == [s.model_dump() for s in sample.systems]
    assert (pdr.benchmark.name, pdr.benchmark.setting) == ("pdr", "context")
    assert [(j["name"], j["axes"]) for j in pdr.judges] == [("pqr", ["P"])]
    assert pdr.web.sandbox.corpus == "wiki"


@pytest.mark.battery
def test_the_sample_grid_scores_every_episode_and_only_tool_access_recalls(tmp_path, cache_dir):
    done = atelier("run", str(SAMPLE), "--limit", "1", "--no-progress", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:] + degraded(tmp_path / "run")
    results = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 10 and all(r["status"] == "ok" and r["scores"] for r in results)
    tool_systems = {s.name for s in load_recipe(SAMPLE).systems if s.name.endswith(("-tool", "-both"))}
    assert len(tool_systems) == 6 and set(recalls(tmp_path / "run")) == tool_systems


@pytest.mark.battery
def test_the_pdr_grid_runs_on_synthesized_contexts(tmp_path, cache_dir):
    contexts = tmp_path / "ctx"
    made = atelier(
        "simulate", "history", "--benchmark", "pdr", "--limit", "1", "--model", "scripted",
        "--out", str(contexts), "--no-progress", "--no-check",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    recipe = tmp_path / "recipe.toml"
    text = PDR.read_text().replace(
        'options = { contexts_file = "runs/out/pdr-contexts/contexts_en.jsonl" }',
        'options = { contexts_file = "ctx/contexts_en.jsonl", users = ["User1"] }',
    )
    recipe.write_text(text)
    assert 'users = ["User1"]' in recipe.read_text()
    out = tmp_path / "run"
    done = atelier(
        "run",
        str(recipe),
        "--limit",
        "1",
        "--systems",
        "rag-none,rag-retrieval-tool",
        "--no-progress",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:] + degraded(out)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["system"] for r in results} == {"rag-none", "rag-retrieval-tool"}
    assert all(r["status"] == "ok" and r["scores"]["pqr"] is not None for r in results)
    assert set(recalls(out)) == {"rag-retrieval-tool"}
    web = json.loads((out / "summary.json").read_text())["web"]
    assert web["corpus"] == "wiki"
    shutil.rmtree(contexts)
    missing = atelier("run", str(recipe), "--limit", "1", "--no-progress", "--out", str(tmp_path / "again"))
    assert missing.returncode == 2 and "contexts_en.jsonl" in missing.stderr
