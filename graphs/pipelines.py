"""Pipelines (systems' graphs) by name. Each takes `PipelineInput` and returns `PipelineOutput`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel, ConfigDict

from benchmarks.named_registry import NamedRegistry


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    build: Callable[[], object]  # -> a compiled LangGraph subgraph
    options: type[BaseModel] = NoOptions  # validates a system's `pipeline_options`


PIPELINES: NamedRegistry[PipelineSpec] = NamedRegistry("pipeline")


def _register_builtin() -> None:
    from graphs.direct import build_direct_graph

    PIPELINES.register("direct", PipelineSpec("direct", "answer from the user's context, no search", build_direct_graph))

    from graphs.external.graph import build_external_graph
    from graphs.external.options import ExternalOptions

    PIPELINES.register("external", PipelineSpec(
        "external", "an external deep-research agent (open_deep_research, gpt_researcher) through the gateway endpoint",
        build_external_graph, ExternalOptions,
    ))


_register_builtin()


def pipeline_names() -> list[str]:
    return PIPELINES.names()
