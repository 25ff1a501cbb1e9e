"""The Python API (issue 43): `atelier.run` / `atelier.arun` / `atelier.open_run` and `Run`, from a
script and from inside a running event loop (Jupyter's), and docs/notebooks.md's example, executed."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import atelier
from atelier.benchmarks.common.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]


def test_importing_atelier_imports_nothing_else():
    code = "import sys, atelier; print(sorted(m for m in sys.modules if m.startswith('atelier.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
    assert {"run", "arun", "open_run", "Run"} <= set(dir(atelier))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = atelier.nothing  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """`atelier.run("quickstart", limit=2)`, called from inside a running event loop as a notebook cell
    is: the run goes on in a thread of its own."""
    out = tmp_path_factory.mktemp("api") / "run"

    async def cell():
        return atelier.run("quickstart", limit=2, out=out)

    return asyncio.run(cell())


def test_a_run_from_a_running_loop_gives_a_run_with_one_row_per_episode_and_judge(quickstart):
    run = quickstart
    assert run.outcome is not None and run.outcome.exit_code == 0
    assert repr(run) == f"Run({str(run.path)!r}, 4 scored, 0 failed of 4 episodes)"
    results = run.results
    assert len(results) == 4 and {r.system for r in results} == {"direct-none", "direct-full"}
    assert all(r.response is not None and r.judgments for r in results)
    frame = run.to_pandas()
    assert len(frame) == len(results) * len(run.judges) == 4 and run.judges == ["lampqa_aspects"]
    assert set(frame.columns) >= {"case_id", "system", "epoch", "judge", "score", "judge_failed", "degraded"}
    assert frame["score"].notna().all() and not frame["judge_failed"].any()
    means = frame.groupby("system")["score"].mean()
    for system, stats in run.summary["systems"].items():
        assert means[system] == pytest.approx(stats["judges"]["lampqa_aspects"]["mean"])
    assert run.ledger and all(call.run_id == run.path.name for call in run.ledger)
    assert atelier.open_run(run.path).summary == run.summary
    assert atelier.open_run(str(run.path)).rows() == run.rows()


def test_a_run_with_two_judges_has_two_rows_per_episode_and_failed_episodes_keep_theirs(tmp_path):
    recipe = {
        "name": "two-judges",
        "benchmark": {"name": "tiny", "limit": 1},
        "systems": [
            {"name": "plain", "memory": {"backend": "none"}},
            {
                "name": "gold",
                "pipeline": "rag",
                "memory": {"backend": "none"},
                "pipeline_options": {"gold_context": True},
            },
        ],
        "judges": [{"name": "lampqa_aspects"}, {"name": "lampqa_aspects", "label": "again", "repeats": 2}],
    }
    run = atelier.run(recipe, out=tmp_path / "run", preflight=False)
    rows = run.rows()
    assert [(r["system"], r["judge"]) for r in rows] == [
        ("plain", "lampqa_aspects"),
        ("plain", "again"),
        ("gold", "lampqa_aspects"),
        ("gold", "again"),
    ]
    failed = [r for r in rows if r["system"] == "gold"]  # the tiny cases carry no gold information
    assert all(r["status"] == "error" and r["score"] is None and r["judge_failed"] for r in failed)
    assert "has no gold information" in failed[0]["episode_error"]
    assert run.outcome is not None and run.outcome.exit_code == 3


async def test_arun_is_awaited_in_the_callers_loop(tmp_path):
    run = await atelier.arun("quickstart", limit=1, systems=["direct-none"], out=tmp_path / "run")
    assert [r.system for r in run.results] == ["direct-none"]


def test_bad_input_is_refused_naming_what_is_valid(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown override 'limt'; valid: model, .*limit, .*out, progress, preflight"
    ):
        atelier.run("quickstart", limt=2)
    with pytest.raises(
        ConfigError, match=r"no recipe file 'quickstrat' and no shipped recipe of that name; shipped: .*quickstart"
    ):
        atelier.run("quickstrat")
    with pytest.raises(DataError, match="no such run folder"):
        atelier.open_run(tmp_path / "nothing")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(DataError, match="not a finished run folder: it has no summary.json"):
        atelier.open_run(tmp_path / "half")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_notebook_page_example_runs(tmp_path):
    """docs/notebooks.md's Python, as a reader would run it (in a folder of their own)."""
    (block,) = python_blocks(ROOT / "docs" / "notebooks.md")
    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p)
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"Run\('runs/out/quickstart-[^']+', 4 scored, 0 failed of 4 episodes\)", done.stdout)
    assert "prompt tokens" in done.stdout and list((tmp_path / "runs" / "out").iterdir())
