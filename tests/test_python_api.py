"""The Python API (issue 43): `atelier.run` / `atelier.arun` / `atelier.open_run` and `Run`, from a
script and from inside a running event loop (Jupyter's), and docs/notebooks.md's example, executed."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
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


async def test_arun_runs_nothing_of_the_run_on_the_callers_loop(tmp_path, monkeypatch):
    """A notebook's loop keeps turning while `await atelier.arun(...)` runs: loading the recipe,
    building the runner and the run itself happen in another thread (measured as where they run,
    not as a wall-clock gap a loaded machine would make flaky)."""
    from atelier.runs.execution import python_api
    from atelier.runs.execution.runner import Runner

    threads: dict[str, set[int]] = {"as_recipe": set(), "Runner.run": set()}
    as_recipe, runner_run = python_api.as_recipe, Runner.run

    def recorded_as_recipe(*args, **kwargs):
        threads["as_recipe"].add(threading.get_ident())
        return as_recipe(*args, **kwargs)

    async def recorded_run(self, *args, **kwargs):
        threads["Runner.run"].add(threading.get_ident())
        return await runner_run(self, *args, **kwargs)

    monkeypatch.setattr(python_api, "as_recipe", recorded_as_recipe)
    monkeypatch.setattr(Runner, "run", recorded_run)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    turning = asyncio.create_task(ticker())
    try:
        run = await atelier.arun("quickstart", limit=1, systems=["direct-none"], out=tmp_path / "run")
    finally:
        turning.cancel()
    assert [r.system for r in run.results] == ["direct-none"]
    here = threading.get_ident()
    assert threads["as_recipe"] and threads["Runner.run"] and here not in threads["as_recipe"] | threads["Runner.run"]
    assert ticks > 0  # the caller's loop turned while the run went on


def test_looking_up_atelier_arun_imports_nothing_heavy():
    """`await atelier.arun(...)` first looks the function up, on the caller's loop: that import is
    the API module alone, none of the run's."""
    code = (
        "import sys, atelier; atelier.arun; "
        "print(sorted(m for m in sys.modules if m.startswith('atelier.') and not m.endswith('python_api')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "['atelier.runs', 'atelier.runs.execution']"


@pytest.mark.timeout(120)  # a cancel that never reached the run would leave it asleep for an hour
async def test_cancelling_arun_cancels_the_run(tmp_path, monkeypatch):
    from atelier.runs.execution.runner import Runner

    running = threading.Event()

    async def endless(self, *args, **kwargs):
        running.set()
        await asyncio.sleep(3600)

    monkeypatch.setattr(Runner, "run", endless)
    task = asyncio.create_task(atelier.arun("quickstart", limit=1, out=tmp_path / "run", preflight=False))
    await asyncio.to_thread(running.wait, 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not [t for t in threading.enumerate() if t.name == "atelier-run"]  # the run's thread has ended


def test_bad_input_is_refused_naming_what_is_valid(tmp_path, monkeypatch):
    with pytest.raises(
        ConfigError,
        match=r"unknown override 'limt'; valid: model, .*limit, .*out, progress, preflight; did you mean 'limit'\?",
    ):
        atelier.run("quickstart", limt=2)
    with pytest.raises(ConfigError, match=r"no shipped recipe 'quickstrat'; did you mean 'quickstart'\?"):
        atelier.run("quickstrat")
    with pytest.raises(DataError, match="no such run folder"):
        atelier.open_run(tmp_path / "nothing")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=f"no such run folder \\(looked for {tmp_path}/runs/out/x\\)"):
        atelier.open_run("runs/out/x")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(DataError, match="not a finished run folder: it has no summary.json"):
        atelier.open_run(tmp_path / "half")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def run_page_example(page: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """A docs page's one Python block, run as a reader would run it (a script, in a folder of their own)."""
    (block,) = python_blocks(ROOT / "docs" / page)
    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p)
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_notebook_page_example_runs(tmp_path):
    """docs/notebooks.md's Python, as a reader would run it (in a folder of their own)."""
    done = run_page_example("notebooks.md", tmp_path)
    assert re.search(r"Run\('runs/out/quickstart-[^']+', 4 scored, 0 failed of 4 episodes\)", done.stdout)
    assert "prompt tokens" in done.stdout and list((tmp_path / "runs" / "out").iterdir())


def test_the_plugin_api_page_example_runs(tmp_path):
    """docs/plugin-api.md's pipeline and judge, written in a script and passed to atelier.run as objects."""
    done = run_page_example("plugin-api.md", tmp_path)
    assert re.search(r"Run\('runs/out/plugin-api-[^']+', 2 scored, 0 failed of 2 episodes\) \[", done.stdout)


# ------------------------------------------------------------------ plugin objects in a dict recipe

MYLAB = ROOT / "examples" / "mylab"


def object_recipe(memory: object, pipeline: object, judge: object, benchmark: object | str = "sample") -> dict:
    return {
        "name": "objects",
        "benchmark": {"name": benchmark, "limit": 1},
        "systems": [{"name": "mine", "pipeline": pipeline, "memory": {"backend": memory, "k": 2}}],
        "judges": [{"name": judge, "min_words": 5}],
    }


def test_a_dict_recipe_takes_classes_functions_and_instances_recorded_by_import_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(MYLAB))
    module = tmp_path / "lab_objects.py"  # a compiled graph and a BenchmarkSpec: instances bound to names
    module.write_text(
        "from mylab.graphs import build\n"
        "from mylab.data import load\n"
        "from atelier.benchmarks.registry import BenchmarkSpec\n"
        "graph = build()\n"
        "cases = BenchmarkSpec('cases', 'mylab cases', ('all',), ('context',), load)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import lab_objects
    from mylab.judges import Strict
    from mylab.memory import KeywordMemory

    recipe = object_recipe(KeywordMemory, lab_objects.graph, Strict, lab_objects.cases)
    run = atelier.run(recipe, out=tmp_path / "run", preflight=False)
    assert recipe["systems"][0]["memory"]["backend"] is KeywordMemory  # the caller's dict is left as it was
    config = {**run.config["recipe"], "plugins": run.config["plugins"]}
    assert config["systems"][0]["pipeline"] == "lab_objects:graph"
    assert config["systems"][0]["memory"]["backend"] == "mylab.memory:KeywordMemory"
    assert config["judges"][0]["name"] == "mylab.judges:Strict" and config["benchmark"]["name"] == "lab_objects:cases"
    assert {(p["kind"], p["target"]) for p in config["plugins"]} >= {
        ("memory backend", "mylab.memory:KeywordMemory"),
        ("pipeline", "lab_objects:graph"),
        ("judge", "mylab.judges:Strict"),
        ("benchmark", "lab_objects:cases"),
    }
    assert len(run.results) == 1 and run.results[0].status == "ok", run.results[0].error


def test_an_object_with_no_import_path_is_refused_naming_its_key(monkeypatch):
    monkeypatch.syspath_prepend(str(MYLAB))
    from mylab.judges import Strict
    from mylab.memory import KeywordMemory

    class Local(KeywordMemory):  # defined inside this function: no import path
        pass

    with pytest.raises(ConfigError, match=r"<dict>: systems\[0\]\.memory\.backend: a class .*Local has no import path"):
        atelier.run(object_recipe(Local, "direct", Strict), preflight=False)
    with pytest.raises(ConfigError, match=r"systems\[0\]\.pipeline: a function .*<lambda> has no import path"):
        atelier.run(object_recipe(KeywordMemory, lambda: None, Strict), preflight=False)
    unbound = {"name": "x", "benchmark": {"name": "sample"}, "systems": [{"name": "a", "memory": {"backend": "none"}}]}
    unbound["run"] = {"concurrency": KeywordMemory}
    with pytest.raises(ConfigError, match=r"run\.concurrency: a class KeywordMemory is not a recipe value"):
        atelier.run(unbound, preflight=False)


def test_a_class_defined_in_main_runs_here_and_is_refused_on_ray(monkeypatch, tmp_path):
    """A notebook's class lives in `__main__`: named `__main__:Inline`, it runs in this process; Ray's
    workers could not import it."""
    monkeypatch.syspath_prepend(str(MYLAB))
    from mylab.judges import Strict
    from mylab.memory import KeywordMemory

    inline = type("Inline", (KeywordMemory,), {"__module__": "__main__", "__qualname__": "Inline"})
    monkeypatch.setattr(sys.modules["__main__"], "Inline", inline, raising=False)
    run = atelier.run(object_recipe(inline, "direct", Strict), out=tmp_path / "run", preflight=False)
    assert run.config["recipe"]["systems"][0]["memory"]["backend"] == "__main__:Inline"
    with pytest.raises(ConfigError, match=r"__main__:Inline: defined in __main__, which Ray's workers cannot import"):
        atelier.run(object_recipe(inline, "direct", Strict), executor="ray", preflight=False)
