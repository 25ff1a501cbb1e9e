"""Starting an agent's process for one job, in milliseconds rather than seconds.

Importing an agent (langchain, its providers, the agent itself) takes seconds of CPU; a run
starts one agent process per episode. So for each (interpreter, agent) this process keeps an
agent server (`graphs/external/child --serve`): it imports the agent once and forks a fresh
process per job, in which no agent has run yet (see `child/__main__.py` for its protocol). The
server's environment is `agents.base_env()`; each job adds its session's (endpoint URLs, token).

Where a process cannot fork (not POSIX), each job starts a new interpreter instead.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import os
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

from benchmarks.errors import AtelierError
from graphs.external.agents import base_env, child_command

PREFIX = "@atelier "
STDERR_TAIL = 1500


class AgentServerError(AtelierError):
    """The agent server could not start (or ended): no job can run on it."""


class AgentServer:
    """One preloaded agent server (a child process) and the jobs it runs."""

    def __init__(self, python: str | None, agent: str) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(child_command(python, "--serve", agent), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, env=base_env(),
                                        start_new_session=True)  # Ctrl-C reaches the run, which stops it
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._started: dict[int, Future[int]] = {}
        self._ended: dict[int, Future[int]] = {}
        self.ready: Future[bool] = Future()  # done once the agent is imported (or the server failed)
        self.failure: str | None = None
        threading.Thread(target=self._read, name=f"agent-server-{agent}", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.failure is None and self.process.poll() is None

    def _read(self) -> None:
        assert self.process.stdout is not None
        error = None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", errors="replace")
            if not line.startswith(PREFIX):
                continue  # something the agent's imports printed
            message = json.loads(line[len(PREFIX):])
            with self._lock:
                if "error" in message:
                    error = message["error"]
                elif "ready" in message:
                    _settle(self.ready, True)
                elif "pid" in message:
                    _settle(self._started.pop(message["id"]), message["pid"])
                elif "exit" in message:
                    _settle(self._ended.pop(message["id"]), message["exit"])
        self.process.wait()
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", errors="replace").strip()[-STDERR_TAIL:]
        reason = error or f"exited with code {self.process.returncode}" + (f"; its log ends:\n{tail}" if tail else "")
        with self._lock:
            self.failure = f"the agent server ({' '.join(self.process.args[-2:])}) {reason}"
            for future in [self.ready, *self._started.values(), *self._ended.values()]:
                if not future.done():
                    future.set_exception(AgentServerError(self.failure))
            self._started.clear()
            self._ended.clear()

    async def run(self, input_path: Path, output_path: Path, log_path: Path, env: dict[str, str],
                  timeout_s: float) -> int | None:
        """The job's exit code, or None when it ran out of time (then it is killed)."""
        started, ended = Future(), Future()
        with self._lock:
            if self.failure is not None:
                raise AgentServerError(self.failure)
            job = next(self._ids)
            self._started[job], self._ended[job] = started, ended
            request = {"id": job, "input": str(input_path), "output": str(output_path), "log": str(log_path),
                       "cwd": str(input_path.parent), "env": env}
            assert self.process.stdin is not None
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
            except BrokenPipeError:
                pass  # the server already ended: the reader fails this job's futures with its reason
        try:
            # shielded: a timeout (or the episode's cancellation) must not cancel what the reader settles
            await asyncio.wait([asyncio.shield(asyncio.wrap_future(ended))], timeout=timeout_s)
        finally:
            if not ended.done():  # out of time, or cancelled: the job is killed (as soon as it starts)
                started.add_done_callback(_kill_started)
        if ended.done():
            return ended.result()
        await asyncio.wait([asyncio.shield(asyncio.wrap_future(ended))], timeout=30)
        return None

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()  # the server kills the jobs still running and ends
            except BrokenPipeError:
                pass  # it had ended already
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _settle(future: Future, value: object) -> None:
    if not future.done():
        future.set_result(value)


def _kill_started(started: Future) -> None:
    if not started.cancelled() and started.exception() is None:
        try:
            os.kill(started.result(), signal.SIGKILL)
        except ProcessLookupError:
            pass


_lock = threading.Lock()
_servers: dict[tuple[str | None, str], AgentServer] = {}


def _server(python: str | None, agent: str) -> AgentServer:
    with _lock:
        server = _servers.get((python, agent))
        if server is None or not server.alive:
            server = _servers[(python, agent)] = AgentServer(python, agent)
        return server


@atexit.register
def close_servers() -> None:
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


async def _run_fresh(python: str | None, input_path: Path, output_path: Path, log_path: Path, env: dict[str, str],
                     timeout_s: float) -> int | None:
    """The job in a new interpreter (where a process cannot fork)."""
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *child_command(python, str(input_path), str(output_path)), cwd=input_path.parent,
            env={**base_env(), **env}, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
        )
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            return None


async def run_agent_job(python: str | None, agent: str, input_path: Path, output_path: Path, log_path: Path,
                        env: dict[str, str], timeout_s: float) -> int | None:
    """Run the job whose input is `input_path` (the agent's working folder is its folder)."""
    if not hasattr(os, "fork"):
        return await _run_fresh(python, input_path, output_path, log_path, env, timeout_s)
    server = await asyncio.to_thread(_server, python, agent)
    return await server.run(input_path, output_path, log_path, env, timeout_s)
