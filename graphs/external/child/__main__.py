"""Run external agents on briefs, in the agent's own interpreter. Two ways:

    python graphs/external/child <input.json> <output.json>     # one job in this process
    python graphs/external/child --serve <agent>                # a preloaded server of jobs

A job's input names the agent, the brief (task and user context), the agent's settings and the
run's endpoint; its output is `{"report", "sources", "error", "refused", "details", "run_s"}`
(`run_s`: the agent's run, after its imports), and `"degraded"` when the agent went on past a
failed step (a list of `{"kind", "step", "detail", "count"}`, recorded in the response).

`--serve` imports the agent once (seconds of CPU) and then forks one process per job, so a job
starts in milliseconds from a process in which no agent has run yet. It reads one request per
line on stdin — `{"id", "input", "output", "log", "cwd", "env", "boundary"}`: the job's files, its
working folder, the environment variables of its session and, when the server runs inside the
launcher's namespaces, `{"port", "socket", "read_only", "session", "limits"}`: the endpoint's port,
the Unix socket that reaches it, the paths the job may read beyond its interpreter's, the file the
job reads its session from (its token never passes through this server, whose memory every job is
a copy of; `env` is then empty) and its limits (`guard.enter`) — or `{"kill": id}` (a job past its
time: its processes are killed). It answers
on stdout, each line prefixed `@atelier `: `{"ready": true}` once preloaded (or `{"error": ...}`),
then `{"id", "exit"}` as each job ends. Each job is a process group, killed with its job. It exits
when stdin closes.

Standard library only here; the agent's packages are imported by its runner module (`IMPORTS`).
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import io
import json
import os
import select
import signal
import sys
import time
import traceback
from datetime import UTC
from pathlib import Path
from types import ModuleType

import guard  # this folder: Python puts a directory it runs on the path

PREFIX = "@atelier "


def travel_to(day: str) -> None:
    """Make the agent's clock start at noon UTC of `day` (its prompts carry today's date)."""
    from datetime import datetime

    import time_machine

    time_machine.travel(datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC), tick=True).start()


def load_runner(agent: str) -> ModuleType:
    runner = importlib.import_module(f"run_{agent}")
    for module in runner.IMPORTS:
        importlib.import_module(module)
    return runner


def cut_report(result: dict, max_chars: int | None) -> None:
    """A report longer than the run keeps, cut there and said so (written whole, it could pass the
    job's file size limit and be lost)."""
    report = result.get("report")
    if max_chars is None or not isinstance(report, str) or len(report) <= max_chars:
        return
    result["report"] = report[:max_chars]
    cut = {"kind": "output_truncated", "step": "report", "count": 1}
    cut["detail"] = f"the agent's report of {len(report)} characters was cut to the {max_chars} the run keeps"
    result["degraded"] = [*(result.get("degraded") or []), cut]


def run_job(input_path: Path, output_path: Path, refused: list[str]) -> int:
    job = json.loads(input_path.read_text(encoding="utf-8"))
    result: dict = {"report": "", "sources": [], "error": None, "details": {}}
    try:
        if job.get("today"):
            travel_to(job["today"])
        runner = load_runner(job["agent"])
        ready = time.perf_counter()
        try:
            result.update(asyncio.run(runner.run(job)))
        finally:
            result["run_s"] = round(time.perf_counter() - ready, 3)
        cut_report(result, job.get("max_report_chars"))
    except BaseException as exc:  # noqa: BLE001 - the reason goes back to the run, which records the failure
        result["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    result["refused"] = list(refused)
    output_path.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    return 0 if result["error"] is None else 1


class LogStream(io.TextIOWrapper):
    """A job's stdout and stderr (its log): once the log reaches the job's file size limit, what is
    written is dropped rather than failing the job (the run records the log cut)."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError as exc:
            if exc.errno != errno.EFBIG:
                raise
            return len(text)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            if exc.errno != errno.EFBIG:
                raise


def log_stream(fd: int) -> LogStream:
    raw = io.FileIO(fd, "w", closefd=False)
    return LogStream(io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace", write_through=True)


def say(message: dict) -> None:
    sys.stdout.write(PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def job_folders(request: dict) -> list[str]:
    """The folders a job works in: the only ones it may write inside its boundary."""
    return [request["cwd"], *(os.path.dirname(request[k]) for k in ("input", "output", "log"))]


def fork_job(request: dict, refused: list[str]) -> int:
    """Start `request`'s job in a forked process (the leader of its own process group); its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        try:
            os.setpgid(pid, pid)  # as the child does: a kill that comes at once finds the group
        except ProcessLookupError:
            pass  # it ended already
        return pid
    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # stdin is the server's request pipe: not the job's
        # not through a link a previous job of this folder left in place of its log
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout, sys.stderr = log_stream(1), log_stream(2)
        boundary = request.get("boundary")
        session: dict[str, str] = {}
        if boundary:  # before any of the job's own code: a failure here fails the job, into its log
            read_only = [*guard.interpreter_paths(), *boundary.get("read_only", ())]
            session = guard.enter(
                boundary["port"],
                boundary["socket"],
                job_folders(request),
                read_only,
                boundary.get("limits"),
                boundary.get("session"),
            )
        os.chdir(request["cwd"])
        os.environ.update({**request["env"], **session})
        refused.clear()
        code = run_job(Path(request["input"]), Path(request["output"]), refused)
    except BaseException:  # noqa: BLE001 - into the job's log; its exit code says it failed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # no process of the group is left


def reap(children: dict[int, int]) -> None:
    """Report the jobs that ended; what a job started and left running ends with it. Any other
    child is reaped too: inside its PID namespace this server is init, the parent of orphans."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        job = children.pop(pid, None)
        if job is not None:
            # a group with processes left keeps its number (no new process gets it): only the job's are killed
            kill_group(pid)
            reap_group(pid)
            say({"id": job, "exit": os.waitstatus_to_exitcode(status)})


def reap_group(pgid: int) -> None:
    """Wait for the rest of a job's process group (its init, inside the boundary), killed with it,
    which ended up this server's children: a job is over when all its processes are."""
    while True:
        try:
            os.waitpid(-pgid, 0)
        except ChildProcessError:
            return


def serve(agent: str) -> int:
    refused: list[str] = []
    guard.install(refused)
    try:
        load_runner(agent)
        try:
            import time_machine  # noqa: F401 - preloaded for jobs with a pinned `today`
        except ImportError:
            pass
    except BaseException as exc:  # noqa: BLE001 - the parent reports it for every job it sent
        say({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    say({"ready": True})
    children: dict[int, int] = {}
    pending = b""
    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.05 if children else 1.0)
        if readable:
            chunk = os.read(stdin, 1 << 16)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if not line.strip():
                    continue
                request = json.loads(line)
                if "kill" in request:
                    for pid, job in children.items():
                        if job == request["kill"]:
                            kill_group(pid)
                else:
                    children[fork_job(request, refused)] = request["id"]
        reap(children)
    for pid in children:  # the parent is gone: its jobs have no one to report to
        kill_group(pid)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--serve":
        return serve(argv[2])
    refused: list[str] = []
    guard.install(refused)
    return run_job(Path(argv[1]), Path(argv[2]), refused)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
