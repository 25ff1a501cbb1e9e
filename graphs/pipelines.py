"""Pipelines (systems' graphs) by name. Each takes `PipelineInput` and returns `PipelineOutput`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from benchmarks.named_registry import NamedRegistry


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    build: Callable[[], object]  # -> a compiled LangGraph subgraph
    uses_web: bool = True  # searches or fetches pages (the run's preflight then checks the web answers)


PIPELINES: NamedRegistry[PipelineSpec] = NamedRegistry("pipeline")


def _register_builtin() -> None:
    from graphs.direct import build_direct_graph

    PIPELINES.register("direct", PipelineSpec("direct", "answer from the user's context, no search", build_direct_graph,
                                                uses_web=False))


_register_builtin()


def pipeline_names() -> list[str]:
    return PIPELINES.names()
