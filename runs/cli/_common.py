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
