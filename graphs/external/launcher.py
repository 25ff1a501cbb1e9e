"""Starting an agent's process for one job, in milliseconds rather than seconds, inside its boundary.

Importing an agent (langchain, its providers, the agent itself) takes seconds of CPU; a run
starts one agent process per episode. So for each (interpreter, agent) this process keeps an
agent server (`graphs/external/child --serve`): it imports the agent once and forks a fresh
process per job, in which no agent has run yet (see `child/__main__.py` for its protocol). The
server's environment is `agents.base_env()`; each job adds its session's (endpoint URLs, token).

The boundary (`isolation = "namespaces"`, the default; Linux): the server starts under `unshare`
in its own user, network, PID and mount namespaces — no network but its own loopback, no process
of the machine in sight, so neither this process's environment (`/proc/<pid>/environ`, where a
provider key lives) nor any way out. Each job's only way out is a Unix socket this process opens
for it (`endpoint_relay`) and relays to the job's endpoint, the one address its session's URLs
name; inside, the job listens on that address and forwards to the socket (`child/guard.py`), so
the agent's HTTP clients use the ordinary URLs. A machine that cannot make the namespaces
(`boundary_problem`) refuses the job unless its system says `isolation = "none"`.

Where a process cannot fork (not POSIX), each job starts a new interpreter instead (no boundary).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal, cast

from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.graphs.external.agents import CHILD, base_env, child_command, endpoint_address

Isolation = Literal["namespaces", "none"]
PREFIX = "@atelier "
STDERR_TAIL = 1500
# a user namespace even for root: root inside it holds no capability over the machine
UNSHARE_OPTIONS = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc", "--kill-child")
PROBE_TIMEOUT_S = 60
RELAY_CHUNK = 1 << 16
UNIX_PATH_MAX = 107


class AgentServerError(AtelierError):
    """The agent server could not start (or ended): no job can run on it."""


def boundary_command() -> list[str] | None:
    """The command prefix that starts a process inside the agents' namespaces (None: no `unshare`)."""
    unshare = shutil.which("unshare", path=base_env()["PATH"])
    return [unshare, *UNSHARE_OPTIONS, "--"] if unshare else None


def probe_boundary(python: str | None, command: list[str]) -> str | None:
    """Why a job's boundary cannot be made by `command` for `python` (None: it can, and holds)."""
    try:
        done = subprocess.run(
            [*command, python or sys.executable, str(CHILD / "guard.py"), "--probe"],
            env=base_env(),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"the namespace probe did not finish within {PROBE_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return said[-1] if said else f"the namespace probe exited with code {done.returncode}"


@functools.cache
def boundary_problem(python: str | None) -> str | None:
    """Why this machine cannot run `python`'s agents inside their namespaces (None: it can).
    Probed once per interpreter and process."""
    if sys.platform != "linux":
        return f"they need Linux namespaces and this is {sys.platform}"
    command = boundary_command()
    if command is None:
        return "the unshare command (util-linux) is not on PATH"
    return probe_boundary(python, command)


def require_boundary(python: str | None) -> None:
    """Refuse, in one line, a system whose agents' boundary cannot be made here."""
    problem = boundary_problem(python)
    if problem is not None:
        raise ConfigError(
            f"pipeline_options.isolation: external agents run inside Linux namespaces (unshare: own network, "
            f'processes and /tmp), which cannot be made here ({problem}); set isolation = "none" to run them '
            f"with no OS boundary"
        )


class AgentServer:
    """One preloaded agent server (a child process) and the jobs it runs."""

    def __init__(self, python: str | None, agent: str, *, isolated: bool = True) -> None:
        """`isolated`: inside the agents' namespaces (then each job needs a `boundary`)."""
        command = child_command(python, "--serve", agent)
        if isolated:
            prefix = boundary_command()
            if prefix is None:
                raise ConfigError(
                    "external agents run inside Linux namespaces: the unshare command (util-linux) is not on PATH"
                )
            command = [*prefix, *command]
        self.isolated = isolated
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=base_env(),
            start_new_session=True,
        )  # Ctrl-C reaches the run, which stops it
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
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
            message = json.loads(line[len(PREFIX) :])
            with self._lock:
                if "error" in message:
                    error = message["error"]
                elif "ready" in message:
                    _settle(self.ready, True)
                elif "exit" in message:
                    _settle(self._ended.pop(message["id"]), message["exit"])
        self.process.wait()
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", errors="replace").strip()[-STDERR_TAIL:]
        reason = error or f"exited with code {self.process.returncode}" + (f"; its log ends:\n{tail}" if tail else "")
        with self._lock:
            args = cast(list[str], self.process.args)  # the command list it was started with
            self.failure = f"the agent server ({' '.join(args[-2:])}) {reason}"
            futures: list[Future[Any]] = [self.ready, *self._ended.values()]
            for future in futures:
                if not future.done():
                    future.set_exception(AgentServerError(self.failure))
            self._ended.clear()

    def _send(self, message: dict) -> None:
        """One request line to the server (the caller holds the lock)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the server ended (or was closed): the reader fails the jobs still waiting with its reason

    async def run(
        self,
        input_path: Path,
        output_path: Path,
        log_path: Path,
        env: dict[str, str],
        timeout_s: float,
        boundary: dict | None = None,
    ) -> int | None:
        """The job's exit code, or None when it ran out of time (then it is killed). `boundary`:
        `{"port", "socket"}`, the endpoint's port and the relay's socket (an isolated server)."""
        if self.isolated != (boundary is not None):
            raise AgentServerError(
                "a job's boundary must match its server: an isolated server's jobs have one, others none"
            )
        ended: Future[int] = Future()
        with self._lock:
            if self.failure is not None:
                raise AgentServerError(self.failure)
            job = next(self._ids)
            self._ended[job] = ended
            self._send(
                {
                    "id": job,
                    "input": str(input_path),
                    "output": str(output_path),
                    "log": str(log_path),
                    "cwd": str(input_path.parent),
                    "env": env,
                    "boundary": boundary,
                }
            )
        try:
            # shielded: a timeout (or the episode's cancellation) must not cancel what the reader settles
            await asyncio.wait([asyncio.shield(asyncio.wrap_future(ended))], timeout=timeout_s)
        finally:
            if not ended.done():  # out of time, or cancelled: the server kills the job's processes
                with self._lock:
                    self._send({"kill": job})
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


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(RELAY_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass  # either side went away: the connection is over, as it would be without the relay


@contextlib.asynccontextmanager
async def endpoint_relay(host: str, port: int) -> AsyncIterator[str]:
    """A Unix socket (its path) whose every connection is relayed to `host`:`port` on this event
    loop: an isolated job's one way out. Closed, with its connections, on exit."""
    folder = await asyncio.to_thread(tempfile.mkdtemp, prefix="atelier-endpoint-")  # 0700: this user's; off the loop
    path = os.path.join(folder, "endpoint.sock")
    if len(path.encode()) > UNIX_PATH_MAX:
        await asyncio.to_thread(os.rmdir, folder)
        raise ConfigError(
            f"the endpoint relay's socket path {path} is longer than a Unix socket allows: set a shorter TMPDIR"
        )
    links: set[asyncio.Task] = set()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # the server runs each connection's callback in a task
        links.add(task)
        upstream_writer = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        except OSError:
            pass  # the endpoint is gone: the job's client sees its connection close
        finally:
            for end in (writer, upstream_writer):
                if end is not None:
                    end.close()
            links.discard(task)

    server = await asyncio.start_unix_server(relay, path)
    try:
        yield path
    finally:
        server.close()
        for link in list(links):  # the job has ended: what it left open ends too
            link.cancel()
        if links:
            await asyncio.wait(list(links))
        await asyncio.to_thread(shutil.rmtree, folder)  # the socket (which Python 3.13's server.close() removes itself)


_lock = threading.Lock()
_servers: dict[tuple[str | None, str, bool], AgentServer] = {}


def _server(python: str | None, agent: str, isolated: bool) -> AgentServer:
    with _lock:
        server = _servers.get((python, agent, isolated))
        if server is None or not server.alive:
            server = _servers[(python, agent, isolated)] = AgentServer(python, agent, isolated=isolated)
        return server


@atexit.register
def close_servers() -> None:
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


async def _run_fresh(
    python: str | None, input_path: Path, output_path: Path, log_path: Path, env: dict[str, str], timeout_s: float
) -> int | None:
    """The job in a new interpreter (where a process cannot fork)."""
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *child_command(python, str(input_path), str(output_path)),
            cwd=input_path.parent,
            env={**base_env(), **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            process.kill()
            await process.wait()
            return None


async def run_agent_job(
    python: str | None,
    agent: str,
    input_path: Path,
    output_path: Path,
    log_path: Path,
    env: dict[str, str],
    timeout_s: float,
    isolation: Isolation = "namespaces",
) -> int | None:
    """Run the job whose input is `input_path` (the agent's working folder is its folder). With
    `isolation = "namespaces"` it reaches only the endpoint its session's URLs (`env`) name, and
    is refused (`ConfigError`) where that boundary cannot be made."""
    if isolation == "none":
        if not hasattr(os, "fork"):
            return await _run_fresh(python, input_path, output_path, log_path, env, timeout_s)
        server = await asyncio.to_thread(_server, python, agent, False)
        return await server.run(input_path, output_path, log_path, env, timeout_s)
    if isolation != "namespaces":
        raise ConfigError(f'pipeline_options.isolation: {isolation!r} is neither "namespaces" nor "none"')
    await asyncio.to_thread(require_boundary, python)
    host, port = endpoint_address(env)
    server = await asyncio.to_thread(_server, python, agent, True)
    async with endpoint_relay(host, port) as socket_path:
        return await server.run(
            input_path, output_path, log_path, env, timeout_s, boundary={"port": port, "socket": socket_path}
        )
