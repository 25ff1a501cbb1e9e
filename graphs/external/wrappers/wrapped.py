"""What every shipped wrapper does (graphs/external/wrappers/*.py): a command-protocol agent
(graphs/external/child/run_command.py) that runs another project's own command line on the job.

Standard library only: a wrapper runs in the wrapped agent's interpreter (its checkout's virtual
environment), inside the agents' boundary, where Atelier is not installed. The agent's own run is
a subprocess whose stdout goes to a file in the job's folder (a pipe would be held open by the
helper processes such agents start, MCP stdio servers or browsers) and whose stderr is the job's
log; its environment is the job's (the run's endpoint as OpenAI's, Serper's and Jina's APIs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

URL = re.compile(r"https?://[^\s)\]>\"'`]+")


def read_job() -> dict:
    """The job: on stdin (`job_via = "stdin"`), else in $ATELIER_JOB_FILE."""
    given = sys.stdin.read() if not sys.stdin.isatty() else ""
    if given.strip():
        return json.loads(given)
    return json.loads(Path(os.environ["ATELIER_JOB_FILE"]).read_text(encoding="utf-8"))


def job_folder() -> Path:
    """The job's own folder: the only one it may write inside its boundary."""
    return Path(os.environ["ATELIER_JOB_FILE"]).resolve().parent


def start(description: str) -> tuple[Path, dict, dict]:
    """A wrapper's start: its `--checkout` (the agent's code), the job and the job's settings."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--checkout", required=True, help="the agent's checkout (its code)")
    path = parser.parse_args().checkout
    folder = Path(path).resolve()
    if not folder.is_dir():
        fail(f"the agent's checkout {path} is not a folder (see docs/external-agents.md: where its code goes)")
    job = read_job()
    return folder, job, job.get("settings") or {}


def run(argv: list[str], cwd: Path, env: dict[str, str], name: str) -> str:
    """Run the agent's command line; its stdout (kept in the job folder as `<name>.out`)."""
    out = job_folder() / f"{name}.out"
    print(f"running {name}: {' '.join(argv[:3])} ... (in {cwd})", file=sys.stderr, flush=True)
    with out.open("wb") as stdout:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, check=False)
    text = out.read_text(encoding="utf-8", errors="replace")
    if done.returncode != 0:
        fail(f"{name} exited with code {done.returncode}; its stdout ends: {text.strip()[-300:]}")
    return text


def cited(report: str) -> list[str]:
    """The URLs a report names, in order, once each."""
    return list(dict.fromkeys(url.rstrip(".,;:") for url in URL.findall(report)))


def emit(report: str, details: dict) -> None:
    """The protocol's answer on stdout; a report with nothing in it fails instead."""
    if not report.strip():
        fail("the agent answered with an empty report")
    print(json.dumps({"report": report, "citations": cited(report), "details": details}, ensure_ascii=False))


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(1)
