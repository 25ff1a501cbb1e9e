"""`atelier bench graph`: framework time per LLM call and wall time against the critical path (JSON)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

import typer

from atelier.runs.cli._common import machine_facts, print_json
from atelier.runs.cli.memory import declared, parse_assignments

if TYPE_CHECKING:
    from pydantic import BaseModel


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @bench_app.command("graph")
    def bench_graph(
        pipeline: list[str] = typer.Option(
            ...,
            "--pipeline",
            help="A registered pipeline (direct, rag, planpers, deep_research, external:<agent>, ...); repeat it to "
            "set pipelines side by side on the same cases.",
        ),
        latency_ms: float = typer.Option(0.0, "--latency-ms", min=0, help="Scripted model latency per call."),
        cases: int = typer.Option(3, "--cases", min=1, help="Episodes timed (cases drawn from the benchmark)."),
        case: list[str] = typer.Option([], "--case", help="Time these case ids instead (repeatable)."),
        benchmark: str = typer.Option("sample", "--benchmark"),
        memory: str = typer.Option("none", "--memory", help="Memory backend of the system."),
        option: list[str] = typer.Option(
            [],
            "--option",
            help="A pipeline option, key=value (repeatable; with several pipelines, each must accept it).",
        ),
        checkpointer: str = typer.Option(
            "sqlite", "--checkpointer", help="sqlite (as runs), memory or none: what checkpoints cost."
        ),
        rounds: int = typer.Option(
            1,
            "--rounds",
            min=1,
            help="Time the cases this many times, each round right after its own measure of the stack's floor; "
            "framework_over_litellm_floor is then the median of the rounds' ratios (one round moves +-20%).",
        ),
    ) -> None:
        """Framework ms per LLM call, tokens, and deep_research's wall time over its critical path (JSON); with
        several --pipeline, each one's figures and a per-case side-by-side table."""
        from atelier.graphs.pipelines import PIPELINES, pipeline_variant
        from atelier.runs.bench.graph import bench_graph as run
        from atelier.runs.bench.graph import compare_graphs

        def options_model(name: str) -> type[BaseModel]:
            return PIPELINES.get(pipeline_variant(name)[0]).options

        # the values are read as each pipeline's options declare them (an unknown one: its error later)
        models = [model for name in pipeline for model in declared(partial(options_model, name))]
        settings: dict[str, Any] = dict(
            latency_ms=latency_ms,
            cases=cases,
            case_ids=case,
            benchmark=benchmark,
            memory=memory,
            options=parse_assignments(option, "--option", *models),
            checkpointer=checkpointer,
            rounds=rounds,
        )
        if len(pipeline) == 1:
            result = asyncio.run(run(pipeline[0], **settings))
        else:
            result = asyncio.run(compare_graphs(pipeline, **settings))
        print_json({**result, "machine": machine_facts()})
