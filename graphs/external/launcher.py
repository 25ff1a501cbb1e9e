"""Starting an external agent's job inside its boundary: a registry agent (preloaded, forked in
milliseconds) or any command.

The public interface (what a pipeline uses; it stays stable):

- `run_agent_job(python, agent, input_path, output_path, log_path, env, timeout_s, isolation,
  read_only=())` runs one job of a registry agent (`agents.AGENTS`) whose input is `input_path`;
  its working folder is that file's folder (the job folder: input, output and log live there).
  Returns its exit code, or None when it ran out of time (then it is killed, with everything it
  started); what a job leaves running when it exits ends then too.
- `run_command_job(command, workdir, log_path, env, timeout_s, isolation, read_only=(),
  stdin_path=None, stdout_path=None)` runs any command the same way, in `workdir`, its stdin and
  stdout the given files (else nothing and its log), its stderr the log.
- `command_read_only(command, cwd, env)`: what a command needs to see (its program and its
  interpreter's prefix, the paths its arguments name, its working folder); `run_agent_job` takes it
  as `read_only` for a registry agent that runs a command (`agent = "command"`).
- `sealed_command(command, workdir=, env=, isolation=, read_only=())` is the lower step of
  `run_command_job` for a caller that keeps its own pipes: an async context in which the returned
  `Launch` (argv, env, cwd) starts the command inside its boundary.
- `env` is the job's session (`agents.session_env`: the endpoint's URLs and token) over
  `agents.base_env()`; the one address its URLs name is all an isolated job can reach.
  `read_only`: paths the job may read beyond what it is shown anyway (below).
- `isolation`: `"namespaces"` (the default) or `"none"`; `require_boundary(python)` refuses, in one
  line (`ConfigError`), a machine that cannot make the boundary.

The boundary (`isolation = "namespaces"`; Linux; made by `child/guard.py`, whose docstring says
exactly what a job sees). Namespaces made by `guard` itself rather than bubblewrap: a registry
agent's imports take seconds of CPU, so its server imports it once and forks each job, and the
boundary is entered after that fork, in the job's own process — which an external sandbox program
(it execs a new process) cannot do — and it needs nothing but the standard library. The agent
server starts under `guard.py --namespaces` in its own user namespace (where it holds the
capabilities to mount; root in it has none over the machine; run as root, it also maps the
unprivileged `guard.JOB_ID` its jobs become), network, PID and mount namespaces. Each job then gets
namespaces of its own (its user namespace, as `JOB_ID` or the run's user, under a seccomp filter):
a network whose only way out is a Unix socket this process opens for it (`endpoint_relay`)
and relays to the job's endpoint (inside, `guard` listens on the endpoint's port and forwards to
it, so the agent's HTTP clients use the ordinary URLs); a PID namespace of its own (no job sees,
signals or outlives another, and none can signal the agent server); and a root that shows the
system's programs, the agent's interpreter and packages (wherever they are, a virtual
environment under `/tmp` included) and `read_only` read-only, its job folder read-write, and
nothing else — no `$HOME`, cache, data, recipe or other job. A command is sealed the same way
(`guard.py --jail`): it sees the system's programs and `command_read_only` (its program, the paths
its arguments name, its working folder — read-only, any part of it that leads to the run folder
masked by an empty folder) and `read_only`.

Each job's processes are the job's: killed together when it is past its time or the run ends.
Where a process cannot fork (not POSIX), each agent job starts a new interpreter (no boundary).
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
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.graphs.external.agents import CHILD, base_env, child_command, endpoint_address

Isolation = Literal["namespaces", "none"]
PREFIX = "@atelier "
STDERR_TAIL = 1500
PROBE_TIMEOUT_S = 60
RELAY_CHUNK = 1 << 16
UNIX_PATH_MAX = 107


class AgentServerError(AtelierError):
    """The agent server could not start (or ended): no job can run on it."""


def boundary_command() -> list[str]:
    """The command prefix that starts a process inside the agents' namespaces (`guard.namespaces`:
    a user namespace even for root, whose root holds no capability over the machine)."""
    return [sys.executable, str(CHILD / "guard.py"), "--namespaces", "--"]


def probe_boundary(python: str | None, command: list[str], guard: Path = CHILD / "guard.py") -> str | None:
    """Why a job's boundary cannot be made by `command` for `python`, or does not hold (`guard.probe`
    tries each thing a job must not do): None when it can, and holds."""
    try:
        done = subprocess.run(
            [*command, python or sys.executable, str(guard), "--probe"],
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
    return probe_boundary(python, boundary_command())


def require_boundary(python: str | None) -> None:
    """Refuse, in one line, a system whose agents' boundary cannot be made here."""
    problem = boundary_problem(python)
    if problem is not None:
        raise ConfigError(
            f"pipeline_options.isolation: external agents run inside Linux namespaces (unshare: own network, "
            f'processes and filesystem view), which cannot be made here ({problem}); set isolation = "none" to '
            f"run them with no OS boundary"
        )


class AgentServer:
    """One preloaded agent server (a child process) and the jobs it runs."""

    def __init__(self, python: str | None, agent: str, *, isolated: bool = True) -> None:
        """`isolated`: inside the agents' namespaces (then each job needs a `boundary`)."""
        command = child_command(python, "--serve", agent)
        if isolated:
            command = [*boundary_command(), *command]
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
        `{"port", "socket", "read_only"}`, the endpoint's port, the relay's socket and the paths the
        job may read beyond its interpreter's (an isolated server)."""
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


Bind = Callable[[int], Callable[[], None]]  # a relayed connection's local port -> the call that unbinds it


@contextlib.asynccontextmanager
async def endpoint_relay(host: str, port: int, bind: Bind | None = None) -> AsyncIterator[str]:
    """A Unix socket (its path) whose every connection is relayed to `host`:`port` on this event
    loop: an isolated job's one way out. `bind` is told each relayed connection's local port before
    a byte of it is sent (the endpoint then knows it is this job's: `AgentEndpoint.bind`). Closed,
    with its connections, on exit."""
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
        unbind = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            if bind is not None:
                unbind = bind(upstream_writer.get_extra_info("sockname")[1])
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        except OSError:
            pass  # the endpoint is gone: the job's client sees its connection close
        finally:
            if unbind is not None:
                unbind()
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
    with no_follow.open_file(log_path, "wb") as log:
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
    read_only: Sequence[str | Path] = (),
    bind: Bind | None = None,
    limits: dict[str, int] | None = None,
) -> int | None:
    """Run the job whose input is `input_path` (the agent's working folder is its folder). With
    `isolation = "namespaces"` it reaches only the endpoint its session's URLs (`env`) name, on
    connections `bind` is told of, sees only its folder, its interpreter and `read_only`, within
    `limits` (`guard.LIMITS`); it is refused (`ConfigError`) where that boundary cannot be made. Its
    session (`env`, which holds the token) never passes through the agent server, whose memory every
    job is a copy of: the job reads it from a file beside its relay's socket once in its boundary."""
    if isolation == "none":
        if not hasattr(os, "fork"):
            return await _run_fresh(python, input_path, output_path, log_path, env, timeout_s)
        server = await asyncio.to_thread(_server, python, agent, False)
        return await server.run(input_path, output_path, log_path, env, timeout_s)
    _check_isolation(isolation)
    await asyncio.to_thread(require_boundary, python)
    host, port = endpoint_address(env)
    server = await asyncio.to_thread(_server, python, agent, True)
    async with endpoint_relay(host, port, bind) as socket_path:
        session = os.path.join(os.path.dirname(socket_path), "session.json")  # in the relay's 0700 folder
        await asyncio.to_thread(_write_private, session, env)
        boundary = {
            "port": port,
            "socket": socket_path,
            "read_only": [str(p) for p in read_only],
            "session": session,
            "limits": limits or {},
        }
        return await server.run(input_path, output_path, log_path, {}, timeout_s, boundary=boundary)


def _write_private(path: str, value: Any) -> None:
    """A new file only this user may read, never through a link: what holds a session's token."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as fh:
        json.dump(value, fh)


def _check_isolation(isolation: str) -> None:
    if isolation not in ("namespaces", "none"):
        raise ConfigError(f'pipeline_options.isolation: {isolation!r} is neither "namespaces" nor "none"')


@dataclass(frozen=True)
class Launch:
    """How to start a sealed command: `asyncio.create_subprocess_exec(*argv, env=env, cwd=cwd, ...)`."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def command_paths(command: Sequence[str], env: dict[str, str]) -> list[str]:
    """What `command[0]` needs to run, beyond the system's programs: its folder and, for a program
    in a `bin` folder (a virtual environment's interpreter, a tool installed under a prefix), that
    prefix and the prefix of what it links to."""
    found = shutil.which(command[0], path=env.get("PATH")) if command else None
    if found is None:
        return []
    paths = set()
    for program in (Path(os.path.abspath(found)), Path(os.path.realpath(found))):
        paths.add(str(program.parent))
        if program.parent.name == "bin":
            paths.add(str(program.parent.parent))
    return sorted(paths)


def command_read_only(command: Sequence[str], cwd: str | Path, env: dict[str, str]) -> list[str]:
    """What a command needs to see, read-only, inside the boundary: its program (`command_paths`),
    each file or folder its arguments name (relative ones in `cwd`), and `cwd` itself (a part of
    it that leads to the run folder is masked by the boundary)."""
    named = []
    for arg in command[1:]:
        candidate = Path(arg) if os.path.isabs(arg) else Path(cwd) / arg
        if "\0" not in arg and arg and os.path.lexists(candidate):
            named.append(str(candidate))
    return [*command_paths(command, env), *named, str(cwd)]


@contextlib.asynccontextmanager
async def sealed_command(
    command: Sequence[str],
    *,
    workdir: Path,
    env: dict[str, str],
    isolation: Isolation = "namespaces",
    read_only: Sequence[str | Path] = (),
    bind: Bind | None = None,
    limits: dict[str, int] | None = None,
) -> AsyncIterator[Launch]:
    """How to start `command` in `workdir` with `base_env() | env`, inside the boundary (see the
    module's docstring; `bind`, `limits`: as `run_agent_job`'s) for as long as the block runs: the
    endpoint's relay closes with it."""
    if not command:
        raise ConfigError("an agent's command is empty")
    full_env = {**base_env(), **env}
    if isolation == "none":
        yield Launch(list(command), full_env, workdir)
        return
    _check_isolation(isolation)
    await asyncio.to_thread(require_boundary, None)
    prefix = boundary_command()
    host, port = endpoint_address(env)
    async with endpoint_relay(host, port, bind) as socket_path:
        spec = {
            "limits": limits or {},
            "port": port,
            "socket": socket_path,
            "writable": [str(workdir)],
            "read_only": [*command_read_only(command, workdir, full_env), *(str(p) for p in read_only)],
            "cwd": str(workdir),
            "env": full_env,
            "command": list(command),
        }
        # beside the relay's socket, in its 0700 folder: the spec names the session's token, which a
        # command line would show to every user of the machine; the guard removes it once read
        spec_path = os.path.join(os.path.dirname(socket_path), "spec.json")
        _write_private(spec_path, spec)
        yield Launch([*prefix, sys.executable, str(CHILD / "guard.py"), "--jail", spec_path], base_env(), workdir)


async def run_command_job(
    command: Sequence[str],
    workdir: Path,
    log_path: Path,
    env: dict[str, str],
    timeout_s: float,
    isolation: Isolation = "namespaces",
    read_only: Sequence[str | Path] = (),
    stdin_path: Path | None = None,
    stdout_path: Path | None = None,
    bind: Bind | None = None,
    limits: dict[str, int] | None = None,
) -> int | None:
    """Run `command` in `workdir` as a job (its stdin and stdout the given files, else nothing and
    the log; its stderr the log); its exit code, or None when it ran out of time (then it is killed
    with every process it started)."""
    async with sealed_command(
        command, workdir=workdir, env=env, isolation=isolation, read_only=read_only, bind=bind, limits=limits
    ) as launch:
        with contextlib.ExitStack() as files:
            log = files.enter_context(_open_nofollow(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "wb"))
            stdin = files.enter_context(_open_nofollow(stdin_path, os.O_RDONLY, "rb")) if stdin_path else None
            stdout = (
                files.enter_context(_open_nofollow(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "wb"))
                if stdout_path
                else log
            )
            process = await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=stdin or asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=log,
                start_new_session=True,
            )
            try:
                return await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                return None
            finally:
                # ended, out of time or cancelled: the job's group ends with it, what it left running included
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


def _open_nofollow(path: Path, flags: int, mode: str):
    """A job folder's file, never through a link the job may have left in its place."""
    return os.fdopen(os.open(path, flags | os.O_NOFOLLOW, 0o644), mode)
