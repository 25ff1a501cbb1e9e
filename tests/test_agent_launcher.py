"""The agent server: one preloaded process per agent that forks a fresh process per job; a job past
its time is killed, and a server that cannot start says why to every job sent to it."""

from __future__ import annotations

import asyncio
import json
import socket
import stat

import psutil
import pytest

from graphs.external.agents import session_env
from graphs.external.launcher import AgentServer, AgentServerError

pytest.importorskip("gpt_researcher")


def job_files(folder, brief: str = "Which heat pump suits a solid-wall terrace?"):
    (folder / "input.json").write_text(json.dumps({"agent": "gpt_researcher", "brief": brief, "settings": {}}))
    return folder / "input.json", folder / "output.json", folder / "agent.log"


async def test_a_job_past_its_time_is_killed_and_the_server_goes_on(tmp_path):
    silent = socket.socket()  # a model endpoint that accepts requests and never answers them
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    base = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    server = AgentServer(None, "gpt_researcher")
    try:
        assert await asyncio.wait_for(asyncio.wrap_future(server.ready), 120)  # the agent imported once
        env = session_env(base, "atl-test", "http://127.0.0.1:9/s/x", "http://127.0.0.1:9")
        assert await server.run(*job_files(tmp_path), env, timeout_s=3) is None
        assert not psutil.Process(server.process.pid).children()  # killed and reaped
        assert server.alive
    finally:
        server.close()
        silent.close()
    assert server.process.returncode == 0


async def test_a_server_that_cannot_start_fails_its_jobs_with_the_reason(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no agent here' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    server = AgentServer(str(broken), "gpt_researcher")
    with pytest.raises(AgentServerError, match=r"exited with code 3; its log ends:\nno agent here"):
        await server.run(*job_files(tmp_path), {}, timeout_s=30)
    assert not server.alive and server.ready.exception() is not None
    server.close()
