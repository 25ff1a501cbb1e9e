"""Atelier: an agent-based simulation lab for personalized information seeking.

One installed name, `atelier`; its rooms are the repository's top-level folders, linked here
(`atelier/agents -> ../agents`, ...), so a checkout, an editable install and the wheel all import
them as `atelier.agents`, `atelier.graphs`, `atelier.memory`, `atelier.tools`, `atelier.benchmarks`
and `atelier.runs`. Imports run one way: runs -> graphs -> (memory, tools) -> agents -> benchmarks.

From Python (a notebook): `atelier.run(recipe_or_path, **overrides) -> Run`, `await atelier.arun(...)`
and `atelier.open_run(path) -> Run` (docs/notebooks.md). They load on first use, so `import atelier`
imports nothing else.
"""

from __future__ import annotations

from typing import Any

_API = {
    "run": "atelier.runs.execution.python_api",
    "arun": "atelier.runs.execution.python_api",
    "open_run": "atelier.runs.reading.run_handle",
    "Run": "atelier.runs.reading.run_handle",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'atelier' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
