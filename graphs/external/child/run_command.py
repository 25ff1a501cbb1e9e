"""Any command as an agent (`agent = "command"`): the command protocol, version 1.

The command runs in this job's process group, inside the job's boundary (the launcher's: it
reaches only the run's endpoint), with the job's environment: the session's

    OPENAI_BASE_URL / OPENAI_API_BASE   the run's OpenAI-compatible API (every call ledgered)
    OPENAI_API_KEY                      the session's token, its API key there
    SEARX_URL                           the run's web as SearXNG: GET $SEARX_URL/search?q=...&format=json
    HTTP_PROXY / http_proxy             the proxy that serves the result pages' `url`s

    SERPER_BASE_URL, SERPER_API_KEY     the run's web as Serper's API (POST .../search {"q": ...})
    JINA_BASE_URL, JINA_API_KEY         the run's pages as Jina's reader (GET .../<url of a result>)

and, named for the protocol, ATELIER_OPENAI_BASE, ATELIER_SEARCH_URL (`.../search`),
ATELIER_MCP_URL (MCP tools `web_search`, `fetch_page`), ATELIER_JOB_FILE (the job, as a file) and
ATELIER_PROTOCOL (`1`). The job — `{"protocol", "brief", "task", "user_context", "case_id",
"today", "settings", "endpoint": {...}}` — is on its stdin (`job_via = "stdin"`) or only in
ATELIER_JOB_FILE (`job_via = "file"`). The command prints one JSON object on stdout:

    {"report": "...", "citations": ["https://...", {"url": "https://...", "title": "..."}],
     "details": {...}, "degraded": [{"kind", "step", "detail", "count"}]}

`report` is required and not empty; `citations` (optional) are the sources in the order the
report's `[n]` markers number them; it logs to stderr (kept in the job's `agent.log`). Exit code 0
means the report stands; anything else fails the episode with the code and the end of its stderr.

The result is taken when the command's process exits: what it printed by then is its answer. The
processes it started and left running (an MCP stdio server, a browser, `(sleep 777 &)`) are ended
then, so they neither hold its output open nor outlive it; one that left the job's process group
is ended with the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

IMPORTS: tuple[str, ...] = ()  # nothing to preload: the command is its own program
PROTOCOL = 1
STDERR_TAIL = 800
# after the command exits, how long what it left may hold its output open before it is read as is
PIPE_GRACE_S = 2.0
EXIT_POLL_S = 0.02


class CommandFailed(RuntimeError):
    """The command did not give a report."""


def command_env(job: dict, job_file: str) -> dict[str, str]:
    """The job's environment (its session's URLs and token) and the protocol's names."""
    endpoint = job["endpoint"]
    return {
        **os.environ,
        "ATELIER_PROTOCOL": str(PROTOCOL),
        "ATELIER_OPENAI_BASE": endpoint["openai_base"],
        "ATELIER_SEARCH_URL": f"{endpoint['web_root']}/search",
        "ATELIER_MCP_URL": f"{endpoint['web_root']}/mcp",
        "ATELIER_JOB_FILE": job_file,
        # agents built on Serper and Jina search and read the run's web (the token names the session)
        "SERPER_BASE_URL": f"{endpoint['web_root']}/serper",
        "SERPER_API_KEY": os.environ.get("OPENAI_API_KEY", ""),
        "JINA_BASE_URL": f"{endpoint['web_root']}/jina",
        "JINA_API_KEY": os.environ.get("OPENAI_API_KEY", ""),
    }


def read_report(stdout: bytes) -> dict:
    """The command's JSON object, checked against the protocol (a CommandFailed naming the field)."""
    text = stdout.decode("utf-8", errors="replace").strip()
    try:
        result = json.loads(text)
    except json.JSONDecodeError as exc:
        head = text[:200] or "(nothing)"
        raise CommandFailed(f"its stdout is not one JSON object ({exc.msg} at char {exc.pos}): {head!r}") from None
    if not isinstance(result, dict):
        raise CommandFailed(f"its stdout is JSON but not an object: {type(result).__name__}")
    report = result.get("report")
    if not isinstance(report, str) or not report.strip():
        raise CommandFailed('its JSON has no "report" (a non-empty string)')
    citations = []
    for index, item in enumerate(result.get("citations") or []):
        url = item if isinstance(item, str) else item.get("url") if isinstance(item, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise CommandFailed(f"citations[{index}] is not a URL or an object with one: {item!r:.120}")
        title = item.get("title") if isinstance(item, dict) else None
        citations.append({"url": url, "title": title if isinstance(title, str) else ""})
    details = result.get("details") or {}
    degraded = result.get("degraded") or []
    if not isinstance(details, dict) or not isinstance(degraded, list):
        raise CommandFailed('"details" must be an object and "degraded" a list')
    return {"report": report, "citations": citations, "details": details, "degraded": degraded}


def write_job(payload: dict) -> str:
    """The job as a file in the job's working folder (the process's): its absolute path."""
    path = os.path.abspath("job.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, ensure_ascii=False, indent=1)
    return path


async def run(job: dict) -> dict:
    command = job["command"]
    argv, via, cwd = command["argv"], command["job_via"], command.get("cwd") or None
    payload = {
        "protocol": PROTOCOL,
        **{key: job.get(key) for key in ("brief", "task", "user_context", "case_id", "today")},
        "settings": job.get("settings") or {},
        "endpoint": {
            "openai_base": job["endpoint"]["openai_base"],
            "search_url": f"{job['endpoint']['web_root']}/search",
            "mcp_url": f"{job['endpoint']['web_root']}/mcp",
        },
    }
    job_file = write_job(payload)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=command_env(job, job_file),
            stdin=asyncio.subprocess.PIPE if via == "stdin" else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise CommandFailed(f"could not start {argv[0]!r}: {exc}") from None
    stdin = json.dumps(payload, ensure_ascii=False).encode() if via == "stdin" else None
    stdout, stderr = await collect(process, stdin)
    sys.stderr.write(stderr.decode("utf-8", errors="replace"))  # into the job's agent.log
    if process.returncode != 0:
        tail = stderr.decode("utf-8", errors="replace").strip()[-STDERR_TAIL:]
        raise CommandFailed(f"exited with code {process.returncode}" + (f"; its stderr ends: {tail}" if tail else ""))
    result = read_report(stdout)
    return {
        "report": result["report"],
        "sources": [c["url"] for c in result["citations"]],
        "citations": result["citations"],
        "degraded": result["degraded"],
        "details": {**result["details"], "argv": list(argv)},
    }


async def _read(stream: asyncio.StreamReader | None, into: bytearray) -> None:
    while stream is not None and (chunk := await stream.read(1 << 16)):
        into += chunk


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it stopped reading: its choice
        if data:
            stream.write(data)
            await stream.drain()
        stream.close()


async def collect(process: asyncio.subprocess.Process, stdin: bytes | None) -> tuple[bytes, bytes]:
    """The command's stdout and stderr, taken when it exits (not when its pipes close: a process it
    left running may hold them open for ever); what it left running is ended then."""
    out, err = bytearray(), bytearray()
    readers = [asyncio.ensure_future(_read(process.stdout, out)), asyncio.ensure_future(_read(process.stderr, err))]
    feeding = asyncio.ensure_future(_feed(process.stdin, stdin))
    try:
        # not process.wait(): before Python 3.12 it also waits for the pipes to close
        while process.returncode is None:  # noqa: ASYNC110 - set by asyncio's child watcher, no event to await
            await asyncio.sleep(EXIT_POLL_S)
    finally:
        end_left_behind()
        _, late = await asyncio.wait(readers, timeout=PIPE_GRACE_S)  # what is still in the pipes
        for task in (*late, feeding):
            task.cancel()
    return bytes(out), bytes(err)


def end_left_behind() -> None:
    """End the processes of this job's process group the command left (its helpers): every member
    but this process and its ancestors (inside the job's boundary, its init). Where /proc cannot
    say (not Linux), they end with the job's group when the job does."""
    me = os.getpid()
    try:
        group = _stat(me)[1]
        keep = {me}
        parent = _stat(me)[0]
        while parent > 0:
            keep.add(parent)
            parent = _stat(parent)[0] if os.path.exists(f"/proc/{parent}/stat") else 0
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in keep:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    if _stat(int(entry))[1] == group:
                        os.kill(int(entry), signal.SIGKILL)
    except OSError:
        return


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, process group) of `pid`, from /proc (after the command name, which may hold spaces)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])
