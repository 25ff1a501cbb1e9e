"""The house (issue 32, item 5): floors that imports never run back up, imports that change nothing
in the environment, and process-wide state owned by a run and released with it."""

from __future__ import annotations

import ast
import asyncio
import gc
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[1]
# runs -> graphs -> (memory, tools) -> agents -> benchmarks: a floor imports only the floors below it
FLOORS = {"runs": 4, "graphs": 3, "memory": 2, "tools": 2, "agents": 1, "benchmarks": 0}
# inside runs: cli -> bench -> studies -> execution -> reading -> folder (recipes/ is data)
AGENT_CHILD = "graphs/external/child"
RUNS_FLOORS = {"cli": 5, "bench": 4, "studies": 3, "execution": 2, "reading": 1, "folder": 0}


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
                # the agents' child processes run in the agent's interpreter and never import Atelier: a
                # top-level `agents` there is the OpenAI Agents SDK's package, not a copy of the room
                if top in FLOORS and not path.is_relative_to(root / AGENT_CHILD):
                    wrong.append(f"{path.relative_to(root)} imports {module} (not under atelier.)")
                    continue
                if top == "atelier" and path.is_relative_to(root / AGENT_CHILD):
                    wrong.append(f"{path.relative_to(root)} imports {module} (runs in the agent's interpreter)")
                    continue
                room = rest.split(".")[0] if top == "atelier" else None
                if room in FLOORS and room != package and FLOORS[room] >= floor:
                    wrong.append(f"{path.relative_to(root)} imports {module}")
    return wrong


def test_no_import_runs_back_up_a_floor(tmp_path):
    assert up_the_floors(ROOT) == []
    # the check can fail: a ground-floor module that imports the runner
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bad.py").write_text(
        "from atelier.runs.execution.runner import Runner\nimport tools.web\n"
    )
    assert up_the_floors(tmp_path) == [
        "benchmarks/bad.py imports atelier.runs.execution.runner",
        "benchmarks/bad.py imports tools.web (not under atelier.)",
    ]


def runs_rooms_up(root: Path) -> list[str]:
    """Imports inside runs/ that run back up its rooms' floors, and modules outside any room."""
    wrong = []
    for path in sorted((root / "runs").rglob("*.py")):
        parts = path.relative_to(root / "runs").parts
        if len(parts) == 1:
            if parts[0] != "__init__.py":
                wrong.append(f"runs/{parts[0]} is in no room")
            continue
        room = parts[0]
        for module in imports_of(path):
            names = module.split(".")
            if names[:2] == ["atelier", "runs"] and len(names) > 2:
                other = names[2]
                if other not in RUNS_FLOORS:
                    wrong.append(f"runs/{'/'.join(parts)} imports {module}, in no room")
                elif other != room and RUNS_FLOORS[other] >= RUNS_FLOORS[room]:
                    wrong.append(f"runs/{'/'.join(parts)} imports {module}")
    return wrong


def test_the_runs_rooms_import_only_rooms_below_them(tmp_path):
    assert runs_rooms_up(ROOT) == []
    # the check can fail: reading a run that imports the runner, a module outside the rooms
    (tmp_path / "runs" / "reading").mkdir(parents=True)
    (tmp_path / "runs" / "reading" / "bad.py").write_text("from atelier.runs.execution.runner import Runner\n")
    (tmp_path / "runs" / "loose.py").write_text("")
    assert runs_rooms_up(tmp_path) == [
        "runs/loose.py is in no room",
        "runs/reading/bad.py imports atelier.runs.execution.runner",
    ]


def import_circles(root: Path) -> list[list[str]]:
    """Strongly connected components of the module import graph (every import, also one inside a
    function: a circle through a deferred import is still a circle)."""
    modules: dict[str, Path] = {}
    for room in FLOORS:
        for path in (root / room).rglob("*.py"):
            name = ".".join(("atelier", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
            modules[name] = path

    def known(module: str) -> str | None:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        return module or None

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in filter(None, map(known, targets)):
                if target != name and not name.startswith(target + "."):  # a module's own package is no edge
                    edges[name].add(target)
    import networkx

    graph = networkx.DiGraph([(a, b) for a, bs in edges.items() for b in bs])
    return sorted(sorted(c) for c in networkx.strongly_connected_components(graph) if len(c) > 1)


def test_no_import_circle_in_the_tree(tmp_path):
    assert import_circles(ROOT) == []
    # the check can fail: two modules that import each other, one of them inside a function
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "a.py").write_text("from atelier.tools.b import x\n")
    (tmp_path / "tools" / "b.py").write_text("def x():\n    from atelier.tools import a\n")
    assert import_circles(tmp_path) == [["atelier.tools.a", "atelier.tools.b"]]


def test_atelier_installs_beside_the_openai_agents_sdk(tmp_path):
    """One installed name: outside the checkout, `agents` is the OpenAI Agents SDK (the `agents` extra
    installs it) and Atelier's rooms are under `atelier.`, both imported by one interpreter."""
    try:
        importlib.metadata.version("openai-agents")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("openai-agents (the agents extra) is not installed here; .ci/run's 3.11 venv and wheel job have it")
    probe = (
        "import importlib.metadata as md, json, agents, atelier.agents.models.gateway as gateway\n"
        "from agents import Agent\n"
        "print(json.dumps([agents.__file__, gateway.__file__, md.version('openai-agents')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sdk, gateway, version = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(sdk).parts[-3:] == ("site-packages", "agents", "__init__.py") and version
    assert Path(gateway).parts[-4:] == ("atelier", "agents", "models", "gateway.py")


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
