"""The `langgraph.json` that serves Atelier's graphs, and researchers' own, to LangGraph Studio from
any install — a wheel as well as a checkout (`atelier studio`).

It names no file of the checkout: Atelier's graphs are imported as a module (`atelier.graphs.studio`),
and each plugin pipeline — an installed entry point, or a `module:attr` graph factory — through a
small module written beside the file (`GRAPHS_MODULE`), which imports Atelier's graphs first. That
import loads what a graph would otherwise load lazily on the server's event loop (litellm, the
registries, torch: `graphs.heavy_imports`), so a plugin's graph runs under `langgraph dev` without a
`BlockingError`, whether or not Atelier's own graphs are served beside it.
"""

from __future__ import annotations

import json
import keyword
import re
from pathlib import Path

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError

# Atelier's graphs, as `graphs/studio.py` names them (and the checkout's langgraph.json lists them)
SHIPPED = (
    "episode",
    "direct",
    "rag",
    "planpers",
    "deep_research",
    "research_api",
    "external",
    "memory",
    "judge",
    "simulate",
)
GRAPHS_MODULE = "atelier_graphs.py"


def plugin_pipelines() -> list[str]:
    """The installed plugin pipelines (entry points of group `atelier.plugins` that are pipelines)."""
    from atelier.graphs.pipelines import PIPELINES

    return [name for name in PIPELINES.names() if PIPELINES.origin(name) is not None]


def _variable(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name).strip("_") or "graph"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = f"graph_{base}"
    variable, n = base, 2
    while variable in taken:
        variable, n = f"{base}_{n}", n + 1
    taken.add(variable)
    return variable


def write_studio_config(folder: str | Path, extra: dict[str, str] | None = None) -> Path:
    """Write `folder/langgraph.json` and `folder/atelier_graphs.py` serving Atelier's graphs, every
    installed plugin pipeline, and `extra` (graph name -> a pipeline's `module:attr` or entry-point
    name); the langgraph.json written. A name given twice, or a pipeline that cannot be loaded, is a
    ConfigError naming it."""
    from atelier.graphs.pipelines import PIPELINES

    extra = dict(extra or {})
    served: dict[str, str] = {}
    taken = set(SHIPPED)
    lines = [
        '"""Written by `atelier studio`: the graphs the langgraph.json beside it serves. Atelier\'s graphs',
        "are imported first: that loads what a graph would otherwise load on the server's event loop.",
        '"""',
        "",
        "from atelier.graphs.studio import *  # noqa: F403 - Atelier's graphs",
        "from atelier.graphs.studio import pipeline_graph",
        "",
    ]
    out = Path(folder).resolve()  # the server reads a relative path from its working folder, not this one
    module = out / GRAPHS_MODULE
    for name in SHIPPED:
        served[name] = f"{module}:{name}"
    pipelines = {name: name for name in plugin_pipelines()}
    for name, target in extra.items():
        if name in served or name in pipelines:
            raise ConfigError(f"--graph {name}={target}: a graph named {name!r} is served already; choose another name")
        pipelines[name] = target
    for name, target in pipelines.items():
        PIPELINES.get(target)  # a reference that cannot be loaded, or is no pipeline, is refused here
        variable = _variable(name, taken)
        lines.append(f"{variable} = pipeline_graph({target!r})")
        served[name] = f"{module}:{variable}"
    no_follow.make_folders(out)
    write_atomically(module, "\n".join(lines) + "\n")
    config = out / "langgraph.json"
    write_atomically(config, json.dumps({"dependencies": ["."], "graphs": served}, indent=2) + "\n")
    return config
