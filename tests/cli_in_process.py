"""`atelier ARGS` run in the test's own process, for tests of what a command prints, writes and exits
with: the `cli` fixture. A fresh interpreter per call (tests/test_cli_e2e.py's `atelier`) pays 3-8 s
of imports each time (litellm, scipy, torch and sentence-transformers for the local embedder), which
the tests of a command's output need not pay again; the tests that are about the process itself
(signals, kill -9, a second run on a locked folder, the installed script) keep spawning one.

    def test_x(cli, env):
        done = cli("simulate", "check", "--contexts", path, env=env)
        assert done.returncode == 3 and "..." in done.stderr

`env` is the whole environment the command sees (as `subprocess.run(env=...)` takes it); the
command runs from the repository root unless `cwd` says otherwise. Both are restored afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli(monkeypatch, capsys):
    from atelier.runs.cli import main

    def run(*args: str, env: Mapping[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        with monkeypatch.context() as patch:
            if env is not None:
                for key in set(os.environ) - set(env):
                    patch.delenv(key)
                for key, value in env.items():
                    if os.environ.get(key) != value:
                        patch.setenv(key, value)
            patch.chdir(cwd)
            patch.setattr(sys, "argv", ["atelier", *args])
            capsys.readouterr()
            code: int | str | None = 0
            try:
                main()
            except SystemExit as exited:
                code = exited.code
            out, err = capsys.readouterr()
        if not isinstance(code, int):  # SystemExit("message"): exit 1, the message on stderr
            err, code = err + ("" if code is None else f"{code}\n"), 0 if code is None else 1
        return subprocess.CompletedProcess(["atelier", *args], code, out, err)

    return run
