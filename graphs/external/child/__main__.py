"""Run one external agent on one brief, in the agent's own interpreter:

    python graphs/external/child <input.json> <output.json>

The input names the agent, the brief (task and user context), the agent's settings and this
run's endpoint; the output is `{"report", "sources", "error", "refused", "details", "run_s"}`
(`run_s`: the agent's run, after its imports). Standard library only here; the agent's packages
are imported by its runner module (`IMPORTS`).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

import guard  # this folder: Python puts a directory it runs on the path


def travel_to(day: str) -> None:
    """Make the agent's clock start at noon UTC of `day` (its prompts carry today's date)."""
    from datetime import datetime, timezone

    import time_machine

    time_machine.travel(datetime.fromisoformat(day).replace(hour=12, tzinfo=timezone.utc), tick=True).start()


def main(argv: list[str]) -> int:
    input_path, output_path = Path(argv[1]), Path(argv[2])
    job = json.loads(input_path.read_text(encoding="utf-8"))
    refused: list[str] = []
    guard.install(refused)
    result: dict = {"report": "", "sources": [], "error": None, "details": {}}
    try:
        if job.get("today"):
            travel_to(job["today"])
        runner = importlib.import_module(f"run_{job['agent']}")
        for module in runner.IMPORTS:
            importlib.import_module(module)
        ready = time.perf_counter()
        try:
            result.update(asyncio.run(runner.run(job)))
        finally:
            result["run_s"] = round(time.perf_counter() - ready, 3)
    except BaseException as exc:  # noqa: BLE001 - the reason goes back to the run, which records the failure
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    result["refused"] = refused
    output_path.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
