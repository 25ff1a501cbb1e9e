"""Which kit checks which protocol, with its scratch folder."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.studies.conformance.clauses import Report

if TYPE_CHECKING:
    from pydantic import BaseModel

PROTOCOLS = ("memory", "pipeline", "judge", "benchmark")


def options_model(protocol: str, ref: str) -> type[BaseModel]:
    """The typed config `--option` values set for `protocol`'s kit on `ref` (the kits validate them
    against it): a memory backend's config, a pipeline's options, a judge's table, a benchmark's
    options. A ConfigError (or the registry's error) when `ref` names none."""
    if protocol == "memory":
        from atelier.memory.registry import BACKENDS

        return BACKENDS.get(ref).config_model
    if protocol == "pipeline":
        from atelier.graphs.pipelines import PIPELINES

        return PIPELINES.get(ref).options
    if protocol == "judge":
        from atelier.agents.judges.base import JUDGES

        return JUDGES.get(ref).config_model
    if protocol == "benchmark":
        from atelier.benchmarks.registry import BENCHMARKS

        return BENCHMARKS.get("jsonl" if ref.endswith(".jsonl") else ref).options
    raise ConfigError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")


async def run_check(protocol: str, ref: str, options: dict[str, Any], workdir: Path | None = None) -> Report:
    """The report of `protocol`'s contract on `ref` (a ConfigError for an unknown protocol or ref)."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"atelier-check-{protocol}-") as folder:
            return await _run(protocol, ref, options, Path(folder))
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    return await _run(protocol, ref, options, workdir)


async def _run(protocol: str, ref: str, options: dict[str, Any], workdir: Path) -> Report:
    if protocol == "memory":
        from atelier.runs.studies.conformance.memory import MemoryKit

        return await MemoryKit(ref, options, workdir).run()
    if protocol == "pipeline":
        from atelier.runs.studies.conformance.pipeline import PipelineKit

        return await PipelineKit(ref, options, workdir).run()
    if protocol == "judge":
        from atelier.runs.studies.conformance.judge import JudgeKit

        return await JudgeKit(ref, options, workdir).run()
    from atelier.runs.studies.conformance.benchmark import BenchmarkKit

    return await BenchmarkKit(ref, options, workdir).run()
