"""The agent server: one preloaded process per agent that forks a fresh process per job; a job past
its time is killed (inside the agents' namespaces or not), and a server that cannot start says why
to every job sent to it."""

from __future__ import annotations

import asyncio
import json
import socket
import stat

import psutil
import pytest

from atelier.graphs.external.agents import session_env
from atelier.graphs.external.launcher import AgentServer, AgentServerError, endpoint_relay

pytest.importorskip("gpt_researcher")


def job_files(folder, brief: str = "Which heat pump suits a solid-wall terrace?"):
    (folder / "input.json").write_text(json.dumps({"agent": "gpt_researcher", "brief": brief, "settings": {}}))
    return folder / "input.json", folder / "output.json", folder / "agent.log"


def job_processes(server: AgentServer) -> list[psutil.Process]:
    """The processes of the server's jobs (an isolated server runs under `unshare`: its child is the server)."""
    root = psutil.Process(server.process.pid)
    agent_server = root.children()[0] if server.isolated else root
    return agent_server.children(recursive=True)


@pytest.mark.battery  # a job killed past its time, in both boundaries
@pytest.mark.parametrize("isolated", [True, False], ids=["namespaces", "none"])
async def test_a_job_past_its_time_is_killed_and_the_server_goes_on(tmp_path, isolated):
    silent = socket.socket()  # a model endpoint that accepts requests and never answers them
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    base = f"http://127.0.0.1:{silent.getsockname()[1]}"
    server = AgentServer(None, "gpt_researcher", isolated=isolated)
    try:
        assert await asyncio.wait_for(asyncio.wrap_future(server.ready), 120)  # the agent imported once
        env = session_env(f"{base}/v1", "atl-test", f"{base}/s/x", base)
        if isolated:
            async with endpoint_relay("127.0.0.1", silent.getsockname()[1]) as path:
                boundary = {"port": silent.getsockname()[1], "socket": path}
                assert await server.run(*job_files(tmp_path), env, timeout_s=3, boundary=boundary) is None
        else:
            assert await server.run(*job_files(tmp_path), env, timeout_s=3) is None
        assert job_processes(server) == []  # killed and reaped
        assert server.alive
    finally:
        server.close()
        silent.close()
    assert server.process.returncode == 0


async def test_a_server_that_cannot_start_fails_its_jobs_with_the_reason(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no agent here' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    server = AgentServer(str(broken), "gpt_researcher", isolated=False)
    with pytest.raises(AgentServerError, match=r"exited with code 3; its log ends:\nno agent here"):
        await server.run(*job_files(tmp_path), {}, timeout_s=30)
    assert not server.alive and server.ready.exception() is not None
    server.close()
