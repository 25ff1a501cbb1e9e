"""The house (issue 32, item 5): floors that imports never run back up, imports that change nothing
in the environment, and process-wide state owned by a run and released with it."""

from __future__ import annotations

import ast
import asyncio
import gc
import json
import subprocess
import sys
from pathlib import Path

from atelier.runs.recipe import parse_recipe
from atelier.runs.runner import run_recipe

ROOT = Path(__file__).resolve().parents[1]
# runs -> graphs -> (memory, tools) -> agents -> benchmarks: a floor imports only the floors below it
FLOORS = {"runs": 4, "graphs": 3, "memory": 2, "tools": 2, "agents": 1, "benchmarks": 0}


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def up_the_floors(root: Path) -> list[str]:
    """Imports that run back up a floor, or name a room without `atelier.` (a second copy of it)."""
    wrong = []
    for package, floor in FLOORS.items():
        for path in sorted((root / package).rglob("*.py")):
            for module in imports_of(path):
                top, _, rest = module.partition(".")
                if top in FLOORS:
                    wrong.append(f"{path.relative_to(root)} imports {module} (not under atelier.)")
                    continue
                room = rest.split(".")[0] if top == "atelier" else None
                if room in FLOORS and room != package and FLOORS[room] >= floor:
                    wrong.append(f"{path.relative_to(root)} imports {module}")
    return wrong


def test_no_import_runs_back_up_a_floor(tmp_path):
    assert up_the_floors(ROOT) == []
    # the check can fail: a ground-floor module that imports the runner
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bad.py").write_text("from atelier.runs.runner import Runner\nimport tools.web\n")
    assert up_the_floors(tmp_path) == [
        "benchmarks/bad.py imports atelier.runs.runner",
        "benchmarks/bad.py imports tools.web (not under atelier.)",
    ]


def test_importing_every_package_changes_nothing_in_the_environment():
    # every module but graphs.studio, the entry point LangGraph Studio loads: it applies the defaults
    probe = (
        "import json, os, pkgutil, importlib\n"
        "ENTRY = 'atelier.graphs.studio'\n"
        "before = dict(os.environ)\n"
        "for pkg in ['benchmarks', 'agents', 'tools', 'memory', 'graphs', 'runs']:\n"
        "    m = importlib.import_module('atelier.' + pkg)\n"
        "    for info in pkgutil.walk_packages(m.__path__, 'atelier.' + pkg + '.'):\n"
        "        if '.child' not in info.name and not info.name.endswith('__main__') and info.name != ENTRY:\n"
        "            importlib.import_module(info.name)\n"
        "after = dict(os.environ)\n"
        "print(json.dumps(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))))\n"
    )
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_runs_shared_state_is_released_with_it(tmp_path, cache_dir):
    from atelier.agents.models.gateway import _LIMITS
    from atelier.graphs import resources

    recipe = parse_recipe(
        {
            "name": "house",
            "benchmark": {"name": "tiny", "limit": 1},
            "systems": [
                {"name": "a", "memory": {"backend": "full"}},
                {"name": "b", "pipeline": "rag", "memory": {"backend": "none"}},
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    gc.collect()
    # loops other tests of this worker left alive (pytest-asyncio's among them) are not this test's
    earlier = set(_LIMITS._semaphores.keys())
    kept_before = dict(resources._runs)  # graphs other tests of this worker ran outside any run (Studio's id)
    for attempt in range(3):
        run_recipe(recipe, tmp_path / f"run{attempt}", progress=False)
    assert resources._runs == kept_before  # no ledger, cache, web or context resources kept of ended runs

    async def take() -> None:
        _LIMITS.semaphore("m", 2)

    for _ in range(50):
        asyncio.run(take())
    gc.collect()
    assert set(_LIMITS._semaphores.keys()) <= earlier  # each ended loop took its semaphores with it
