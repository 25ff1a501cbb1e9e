"""`atelier bench pipelines`: LLM calls, tokens and wall time per case, pipelines side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from runs.cli._common import machine_facts, print_json


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @bench_app.command("pipelines")
    def bench_pipelines_command(
        pipeline: list[str] = typer.Option(..., "--pipeline", help="A pipeline, or external:<agent> (repeatable)."),
        benchmark: str = typer.Option("sample", "--benchmark"),
        limit: int = typer.Option(2, "--limit", min=1, help="The first N cases."),
        model: str = typer.Option("scripted", "--model", help="The system model (any litellm provider string)."),
        concurrency: int = typer.Option(1, "--concurrency", min=1, help="Episodes at once (1: wall times alone)."),
        out: Path = typer.Option(Path("runs/out"), "--out", help="Where the bench's run folder goes."),
    ) -> None:
        """Run each pipeline (memory none, no judges, no cache) on the same cases; print per-case figures as JSON."""
        from runs.pipeline_bench import bench_pipelines

        figures = bench_pipelines(pipeline, benchmark=benchmark, limit=limit, model=model, out_dir=out,
                                  concurrency=concurrency)
        print_json({**figures, "machine": machine_facts()})
