"""What an external agent's job may produce and use is bounded (issue 49's finding 6): a command
agent that answers with a 24 MB report and writes 24 MB to stderr is scored on the report cut to
`max_report_chars`, its log stops at the job's file size limit, and both cuts are recorded as
`output_truncated` degradations (so the run exits 3 and says why); the run folder stays small."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe

FLOOD = """
import json, sys
json.load(sys.stdin)
sys.stderr.write("e" * (24 << 20))
print(json.dumps({"report": "A long report. " * ((24 << 20) // 15)}))
"""


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_a_flood_of_output_is_cut_and_recorded(tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    recipe = parse_recipe(
        {
            "name": "flood",
            "benchmark": {"name": "sample", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": "flood",
                    "pipeline": "external",
                    "memory": {"backend": "none"},
                    "pipeline_options": {
                        "agent": "command",
                        "command": [sys.executable, str(script)],
                        "max_report_chars": 5000,
                        "limits": {"file_mb": 2},
                    },
                }
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"dir": str(tmp_path / "llm")},
            "run": {"out_dir": str(tmp_path / "run")},
        }
    )
    folder = run_recipe(recipe, progress=False)
    (result,) = [json.loads(line) for line in folder.results.read_text().splitlines()]
    assert result["status"] == "ok", result.get("error")
    response = result["response"]
    assert len(response["text"]) == 5000 and response["text"].startswith("A long report.")
    cuts = {d["step"]: d for d in response["degraded"] if d["kind"] == "output_truncated"}
    assert set(cuts) == {"report", "agent_log"}
    assert "cut to the 5000 the run keeps" in cuts["report"]["detail"]
    log = next((folder.path / "external" / "flood").glob("*/agent.log"))
    assert log.stat().st_size == 2 << 20  # the job's file size limit: what came after it was dropped
    assert folder_bytes(folder.path) < 4 << 20  # not the 48 MB the agent produced
    summary = json.loads((folder.path / "summary.json").read_text())
    assert "output_truncated" in json.dumps(summary)
