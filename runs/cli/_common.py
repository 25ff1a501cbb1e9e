"""Small helpers shared by the command modules."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from atelier.benchmarks.common.errors import ConfigError


def run_folder_option(out: Path | None) -> Path | None:
    """`--out` as a run folder: never the current directory (`--out ""` or `--out .` would litter it)."""
    if out is not None and out.resolve() == Path.cwd():
        raise ConfigError(f"--out {str(out)!r} is the current directory; give the run a folder of its own")
    return out


def print_json(data: Any) -> None:
    """Print JSON to stdout (benchmarks and metrics print machine-readable results)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


# Instruction-set extensions that decide how fast the embedder and the matrix kernels run here
# (bfloat16 and int8 units above all), so a benchmark figure can be read against its hardware.
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")


def machine_facts() -> dict[str, Any]:
    """The CPU a benchmark ran on: model, usable cores, the relevant ISA extensions (Linux)."""
    import os
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:  # not Linux: the model name from platform is all there is
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cores": cores, "isa": [flag for flag in _CPU_FLAGS if flag in flags]}


def end_with_outcome(outcome: Any, *, label: str | None = None) -> int:
    """Print how a run ended (`runs.reading.outcome.RunOutcome.lines`) on stderr, each line prefixed
    with `label` when given; return its exit code (0, 3 or 130, as `atelier run`'s). None (a folder
    of results with no config.json, whose episodes are not known): nothing to say, 0."""
    import typer

    if outcome is None:
        return 0
    for line in outcome.lines():
        typer.echo(f"{label}: {line}" if label else line, err=True)
    return int(outcome.exit_code)


def run_outcome(run_dir: Path) -> Any:
    """How the run in `run_dir` ended, read from its folder (nothing written); None when the folder
    holds results but no config.json (which episodes the run was to have is then unknown)."""
    from atelier.runs.folder.layout import RunFolder, load_run_config
    from atelier.runs.reading.finish import folder_outcome

    if not (Path(run_dir) / "config.json").exists():
        return None
    return folder_outcome(RunFolder(run_dir), load_run_config(run_dir))


def worst_exit(codes: list[int]) -> int:
    """Several runs' exit codes as one: 130 (a run not finished) over 3 (failed or degraded) over 0."""
    return max(codes, default=0)


def table_console(*, stderr: bool = False) -> Any:
    """A rich console for tables. On a terminal, the terminal's width; otherwise (a pipe, a file, a
    CI log) no width to fit, so a table keeps every name whole instead of cutting it at 80 columns
    (rich's default when it cannot ask a terminal)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=10_000, soft_wrap=True)
