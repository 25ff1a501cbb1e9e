"""`atelier check benchmark FILE` (issue 52): a file of cases that cannot load is bad input — exit 2,
one line naming the file's line and the case — not four broken clauses; a repeated history event id
is named in the broken clause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = (ROOT / "examples" / "mylab" / "cases.jsonl").read_text().splitlines()


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "check", "benchmark", str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cases_that_cannot_load_exit_2_naming_the_line_and_the_case(tmp_path):
    broken = tmp_path / "cases.jsonl"
    broken.write_text("\n".join([CASES[0], '{"id": "x", "user_id": "u", "query": 3}', *CASES[2:]]) + "\n")
    done = check(broken)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {broken}:2: case 'x', field ") and "Traceback" not in done.stderr
    assert "BROKEN" not in done.stdout


def test_a_repeated_history_event_id_is_named(tmp_path):
    case = json.loads(CASES[1])
    case["history"][1]["id"] = case["history"][0]["id"]
    repeated = tmp_path / "cases.jsonl"
    repeated.write_text("\n".join([CASES[0], json.dumps(case), *CASES[2:]]) + "\n")
    done = check(repeated)
    assert done.returncode == 3, done.stdout + done.stderr
    [clause] = [line for line in done.stdout.splitlines() if "BROKEN" in line]
    assert clause.endswith(
        f"the Case schema: case {case['id']}: history event id {case['history'][0]['id']!r} is repeated"
    ), clause
