"""`langgraph dev` for tests: a LangGraph server of a langgraph.json on a free port, stopped after.

with langgraph_dev(ROOT, env) as (url, process):
    ...  # url answers /ok; process is the server's (its own process group)
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

START_TIMEOUT_S = 180


def free_port() -> int:
    """A port free now, drawn at random: the machine's other engineers start servers too."""
    for _ in range(200):
        port = random.randrange(20000, 40000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found in 20000..40000")


def _start(folder: Path, env: dict[str, str] | None, graph: str) -> tuple[str, subprocess.Popen] | None:
    """`langgraph dev` of `folder` on a free port once it serves `graph`; None when another server
    took the port first (ours then exits)."""
    port = free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "langgraph"), "dev", "--port", str(port), "--no-browser", "--no-reload"],
        cwd=folder,
        env={
            **os.environ,
            **(env or {}),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if process.poll() is not None:
            return None
        try:
            found = httpx.post(f"{base}/assistants/search", json={"graph_id": graph, "limit": 1}, timeout=2)
            if found.status_code == 200 and found.json() and process.poll() is None:
                return base, process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    _stop(process)
    pytest.fail(f"langgraph dev in {folder} did not serve {graph!r} within {START_TIMEOUT_S} s")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def langgraph_dev(
    folder: Path, graph: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """`langgraph dev` serving `folder`'s langgraph.json, its `graph` ready; stopped (its whole
    process group) on exit."""
    for _ in range(3):
        started = _start(folder, env, graph)
        if started is not None:
            break
    else:
        pytest.fail(f"langgraph dev in {folder} could not get a port of its own in 3 tries")
    try:
        yield started
    finally:
        _stop(started[1])
