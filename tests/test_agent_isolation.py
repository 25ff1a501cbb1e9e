"""The boundary of an external agent's processes: they reach the run's endpoint and nothing else.

Each way out that Python's audit hook never saw — curl in a subprocess, wget through `os.system`,
a new interpreter, `connect` through ctypes, a UDP datagram, a Unix socket of the machine (after
trying to unmount the fresh /tmp), reading `/proc/<pid>/environ` for a provider key — runs inside
a job the way an agent runs (`run_agent_job`, its agent server, the forked job), against canaries
listening on this machine's loopback that must hear nothing. Run without the boundary
(`isolation = "none"`), the same attempts reach every canary: the attempts are real. The endpoint
itself answers from inside, to Python and to curl. A machine that cannot make the boundary refuses
external agents in one line, unless a system says `isolation = "none"`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.openai_api import EndpointSession
from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.graphs.external import agents, launcher
from atelier.graphs.external.agents import session_env
from atelier.graphs.external.child import guard
from atelier.graphs.external.endpoint import AgentEndpoint
from atelier.graphs.external.options import ExternalOptions
from atelier.graphs.pipelines import check_systems_available
from atelier.runs.folder.recipe import parse_recipe

ROOT = Path(__file__).resolve().parent.parent
AGENT = "bypass"  # the runner below, found by the agent server on PYTHONPATH
PLANTED_KEY = "sk-planted-" + "7" * 32
WAYS_OUT = ("python_connect", "curl", "wget", "new_interpreter", "ctypes_connect", "udp_sendto", "unix_socket")

RUNNER = textwrap.dedent('''
    """Attempts to reach past an agent's boundary (tests/test_agent_isolation.py); each says how it ended."""
    import ctypes, json, os, shutil, socket, struct, subprocess, sys, urllib.error, urllib.request

    IMPORTS = ()
    LIBC = ctypes.CDLL(None, use_errno=True)


    def failed(exc):
        return f"failed: {type(exc).__name__}: {exc}"


    def exited(done):
        said = (done.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"exit {done.returncode}: {said[-1] if said else ''}"


    def python_connect(probe):
        with socket.create_connection(("127.0.0.1", probe["tcp"]), timeout=3) as conn:
            conn.sendall(b"python_connect")
        return "connected"


    def curl(probe):
        url = f"http://127.0.0.1:{probe['tcp']}/curl"
        if shutil.which("curl"):
            return exited(subprocess.run(["curl", "-sS", "-m", "3", url], capture_output=True))
        code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=3)"
        return exited(subprocess.run([sys.executable, "-c", code], capture_output=True))


    def wget(probe):
        url = f"http://127.0.0.1:{probe['tcp']}/wget"
        if shutil.which("wget"):
            return f"exit {os.system(f'wget -q -T 3 -t 1 -O /dev/null {url}') >> 8}"
        code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=3)"
        return f"exit {os.system(f'{sys.executable} -c {code!r}') >> 8}"


    def new_interpreter(probe):
        code = ("import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)"
                ".sendall(b'new_interpreter')")
        return exited(subprocess.run([sys.executable, "-c", code, str(probe["tcp"])], capture_output=True))


    def ctypes_connect(probe):
        fd = LIBC.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        address = struct.pack("=H", socket.AF_INET) + struct.pack("!H", probe["tcp"]) + socket.inet_aton("127.0.0.1") + bytes(8)
        try:
            if LIBC.connect(fd, address, len(address)) != 0:
                return f"refused: {os.strerror(ctypes.get_errno())}"
            LIBC.send(fd, b"ctypes_connect", 14, 0)
            return "connected"
        finally:
            LIBC.close(fd)


    def udp_sendto(probe):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(b"udp_sendto", ("127.0.0.1", probe["udp"]))
        return "sent"


    def uncover_tmp(probe):
        """Inside the boundary only: a job's /tmp is a mount of its own, which this would undo."""
        if LIBC.umount2(b"/tmp", 2) == 0:  # MNT_DETACH
            return "unmounted /tmp"
        return f"umount /tmp: {os.strerror(ctypes.get_errno())}"


    def unix_socket(probe):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(3)
            conn.connect(probe["unix"])
            conn.sendall(b"unix_socket")
        return "connected"


    def new_namespace(probe):
        if LIBC.unshare(0x40000000) == 0:  # CLONE_NEWNET
            return "made a network namespace"
        return f"unshare: {os.strerror(ctypes.get_errno())}"


    def environ(probe):
        """Every process whose environment this job can read that holds the planted key."""
        holders = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if probe["key"].encode() in fh.read():
                        holders.append(int(pid))
            except OSError:
                continue  # not readable (or gone): not a way to the key
        return {"own": probe["key"] in os.environ.values(), "parent": os.getppid() in holders, "holders": holders}


    def endpoint(probe):
        url = os.environ["OPENAI_BASE_URL"] + "/models"
        token = os.environ["OPENAI_API_KEY"]
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            python = [answer.status, sorted(m["id"] for m in json.load(answer)["data"])]
        done = subprocess.run(["curl", "-sS", "-m", "10", "-H", f"Authorization: Bearer {token}", url], capture_output=True)
        curled = sorted(m["id"] for m in json.loads(done.stdout)["data"]) if done.returncode == 0 else exited(done)
        return {"python": python, "curl": curled}


    def kernel_settings(probe):
        """The machine's kernel settings through /proc/sys (opened for writing only: nothing is written)."""
        outcomes = {}
        for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname"):
            try:
                os.close(os.open(path, os.O_WRONLY))
                outcomes[path] = "opened for writing"
            except OSError as exc:
                outcomes[path] = failed(exc)
        return outcomes


    def regain_capabilities(probe):
        """A user namespace of its own (with a mount namespace): capabilities again, then a tmpfs mounted."""
        if LIBC.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
            return f"unshare: {os.strerror(ctypes.get_errno())}"
        caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
        mounted = LIBC.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, None) == 0  # in its own mount namespace
        return f"CapEff {caps}" + (", mounted a tmpfs" if mounted else "")


    def identity(probe):
        return {"uid": os.getuid(), "hostname": os.uname().nodename, "seccomp": [
            l.split()[1] for l in open("/proc/self/status") if l.startswith(("NoNewPrivs", "Seccomp:"))]}


    def tokens_in_memory(pid):
        """Every session token in the readable memory of process `pid`, or why it could not be read."""
        import re
        found = set()
        try:
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                for line in maps:
                    span, perms = line.split()[:2]
                    if not perms.startswith("r"):
                        continue
                    start, end = (int(x, 16) for x in span.split("-"))
                    if end - start > 256 << 20:
                        continue  # a reservation, not data
                    try:
                        found.update(re.findall(rb"atl-[0-9a-f]{32}", os.pread(mem.fileno(), end - start, start)))
                    except OSError:
                        continue  # a guard page, a device mapping
        except OSError as exc:
            return failed(exc)
        return sorted(t.decode() for t in found)


    def steal_tokens(probe):
        """Another job's session token, from this job's memory (a copy of the agent server's), its
        parent's (/proc/<parent>/mem), every process's environment and every file in sight."""
        own = os.environ["OPENAI_API_KEY"]
        found = {"own_memory": tokens_in_memory("self"), "parent_memory": tokens_in_memory(os.getppid())}
        environs = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    environs.append(fh.read())
            except OSError:
                continue
        found["environ"] = [t.decode() for data in environs for t in __import__("re").findall(rb"atl-[0-9a-f]{32}", data)]
        in_files = set()
        for folder in ("/tmp", "/dev/shm", os.getcwd(), os.path.dirname(probe["victim"])):
            for root, _, names in os.walk(folder):
                for name in names:
                    try:
                        with open(os.path.join(root, name), "rb") as fh:
                            in_files.update(__import__("re").findall(rb"atl-[0-9a-f]{32}", fh.read()))
                    except OSError:
                        continue
        found["files"] = sorted(t.decode() for t in in_files)
        return {k: v if isinstance(v, str) else sorted(set(v) - {own}) for k, v in found.items()}


    def use_token(probe):
        """The endpoint, asked with this job's token and with another's (as if it had leaked)."""
        answers = {}
        for whose, token in (("own", os.environ["OPENAI_API_KEY"]), ("other", probe["other_token"])):
            request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models",
                                             headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    answers[whose] = answer.status
            except urllib.error.HTTPError as exc:
                answers[whose] = exc.code
            search = os.environ["SEARX_URL"].replace(os.environ["OPENAI_API_KEY"], token) + "/search?q=x&format=json"
            try:
                with urllib.request.urlopen(search, timeout=10) as answer:
                    answers[f"{whose}_search"] = answer.status
            except urllib.error.HTTPError as exc:
                answers[f"{whose}_search"] = exc.code
        return answers


    def forks(probe):
        """How many of 300 processes it may start (each waits to be killed)."""
        import signal
        started = []
        for _ in range(300):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                signal.pause()
                os._exit(0)
            started.append(pid)
        for pid in started:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        return len(started)


    def sizes(probe):
        """The sizes of its /tmp and /dev/shm (MB), and how much of a 40 MB file it may write."""
        out = {p: os.statvfs(p).f_blocks * os.statvfs(p).f_frsize >> 20 for p in ("/tmp", "/dev/shm")}
        written = 0
        try:
            with open("big.bin", "wb", buffering=0) as fh:
                for _ in range(40):
                    written += fh.write(b"x" * (1 << 20))
        except OSError as exc:
            out["big_file"] = failed(exc)
        out["written_mb"] = written >> 20
        return out


    def sleeper(probe):
        return subprocess.Popen(["sleep", "300"]).pid  # left running when the job ends


    def read(probe):
        """Each planted file's first line, or why it could not be read."""
        outcomes = {}
        for path in probe["read"]:
            try:
                with open(path, encoding="utf-8") as fh:
                    outcomes[path] = fh.readline().strip()
            except OSError as exc:
                outcomes[path] = failed(exc)
        return outcomes


    def write(probe):
        outcomes = {}
        for path in probe["write"]:
            try:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write("poisoned by a job")
                outcomes[path] = "wrote"
            except OSError as exc:
                outcomes[path] = failed(exc)
        return outcomes


    def unix_sockets(probe):
        outcomes = {}
        for path in probe["sockets"]:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.settimeout(3)
                    conn.connect(path)
                    conn.sendall(b"unix_socket")
                outcomes[path] = "connected"
            except OSError as exc:
                outcomes[path] = failed(exc)
        return outcomes


    def processes():
        """(pid, command line, working folder or why unreadable) of every process in sight."""
        seen = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read().replace(b"\\0", b" ").decode(errors="replace")
            except OSError:
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError as exc:
                cwd = failed(exc)
            seen.append((int(pid), cmdline, cwd))
        return seen


    def other_job(probe):
        """The concurrent job: its input read through its folder and through /proc, then SIGKILL."""
        victim = probe["victim"]
        found = {"by_path": read({"read": [os.path.join(victim, "input.json")]})}
        pids = [pid for pid, _, cwd in processes() if cwd == victim]
        found["pids"] = pids
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cwd/input.json", encoding="utf-8") as fh:
                    found["through_proc"] = fh.read()[:60]
                os.kill(pid, 9)
                found["killed"] = found.get("killed", 0) + 1
            except OSError as exc:
                found["through_proc"] = failed(exc)
        return found


    def agent_server(probe):
        """The agent server's process (it preloads the agent, `--serve`): may it be signalled?"""
        mine = (1, os.getpid())  # this job and (inside the boundary) its own init: forks of the server too
        found = [pid for pid, cmdline, _ in processes() if " --serve " in cmdline + " " and pid not in mine]
        reached = []
        for pid in found:
            try:
                os.kill(pid, 0)  # the permission check of a signal, without one
                reached.append(pid)
            except OSError:
                pass
        return {"seen": len(found), "may_signal": len(reached)}


    def signal_init(probe):
        """PID 1 of the job's namespace: a signal from inside must not end it (nor the job)."""
        import signal, time
        os.kill(1, signal.SIGINT)
        os.kill(1, signal.SIGTERM)
        os.kill(1, signal.SIGKILL)
        time.sleep(0.3)
        return "still running"


    def wait_released(probe):
        """The concurrent job's part: say it started, then wait (at most a minute) to be released."""
        import time
        open("started", "w").close()
        for _ in range(600):
            if os.path.exists("released"):
                return "released"
            time.sleep(0.1)
        return "never released"


    def import_planted(probe):
        """A module of the agent's interpreter's environment, imported only now (not preloaded)."""
        import importlib
        return importlib.import_module(probe["module"]).SAID


    async def run(job):
        probe = job["settings"]
        outcomes = {}
        for name in probe["attempts"]:
            try:
                outcomes[name] = globals()[name](probe)
            except Exception as exc:
                outcomes[name] = failed(exc)
        return {"report": json.dumps(outcomes)}
''')

LAUNCHER = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from atelier.graphs.external import agents, launcher

    runners, workdir, isolation, base = sys.argv[1:5]
    launcher.base_env = lambda: {**agents.base_env(), "PYTHONPATH": runners}
    env = agents.session_env(f"{base}/v1", "atl-planted", f"{base}/s/x", base)
    folder = Path(workdir)
    code = asyncio.run(launcher.run_agent_job(None, "bypass", folder / "input.json", folder / "output.json",
                                              folder / "agent.log", env, 60, isolation))
    launcher.close_servers()
    print(code)
""")


class Canary:
    """Listeners on this machine that no attempt from inside the boundary may reach: TCP and UDP
    on 127.0.0.1, and a Unix socket in /tmp."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="atelier-canary-", dir="/tmp")
        self.tcp = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(os.path.join(self.folder, "canary.sock"))
        self.unix.listen(8)

    @property
    def addresses(self) -> dict:
        return {"tcp": self.tcp.getsockname()[1], "udp": self.udp.getsockname()[1], "unix": self.unix.getsockname()}

    def heard(self) -> set[str]:
        """The attempts that reached a canary (by what each sent; a connection that sent nothing counts too)."""
        said: list[bytes] = []
        for listener in (self.tcp, self.unix):
            listener.setblocking(False)
            while True:
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    break
                with conn:
                    conn.settimeout(2)
                    said.append(conn.recv(4096) or b"(a connection that sent nothing)")
        self.udp.setblocking(False)
        while True:
            try:
                said.append(self.udp.recv(4096))
            except BlockingIOError:
                break
        return {
            next(
                (name for name in WAYS_OUT if f"/{name} ".encode() in data or data == name.encode()),
                data.decode(errors="replace")[:60],
            )
            for data in said
        }

    def close(self) -> None:
        for listener in (self.tcp, self.udp, self.unix):
            listener.close()
        shutil.rmtree(self.folder)


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runners")
    (folder / f"run_{AGENT}.py").write_text(RUNNER)
    yield folder
    with launcher._lock:  # this module's agent servers end with it
        mine = [key for key in launcher._servers if key[1] == AGENT]
        servers = [launcher._servers.pop(key) for key in mine]
    for server in servers:
        server.close()


@pytest.fixture
def bypass_agent(runners, monkeypatch):
    """The agent servers the launcher starts find the `bypass` runner."""
    monkeypatch.setattr(launcher, "base_env", lambda: {**agents.base_env(), "PYTHONPATH": str(runners)})
    return runners


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A run's agent endpoint with one session, whose roles its `/v1/models` lists."""
    server = AgentEndpoint(with_mcp=False).start()
    gateway = Gateway(cache=ResponseCache(tmp_path_factory.mktemp("llm")), ledger=Ledger(None, run_id="r1"))
    session = server.sessions.add(EndpointSession(gateway=gateway, agent=AGENT, roles={"probe": "system"}))
    server.env = session_env(server.openai_base, session.token, f"{server.base_url}/s/x", server.base_url)
    yield server
    server.stop()


@pytest.fixture
def canary():
    listening = Canary()
    yield listening
    listening.close()


def write_job(folder: Path, attempts: list[str], **probe) -> Path:
    (folder / "input.json").write_text(
        json.dumps({"agent": AGENT, "brief": "", "settings": {"attempts": attempts, **probe}})
    )
    return folder / "input.json"


async def attempt(folder: Path, env: dict, isolation: str, attempts: list[str], **probe) -> dict:
    """Run the attempts as a job of the `bypass` agent, through the launcher; how each ended."""
    code = await launcher.run_agent_job(
        None,
        AGENT,
        write_job(folder, attempts, **probe),
        folder / "output.json",
        folder / "agent.log",
        env,
        120,
        isolation,
    )
    assert code == 0, (folder / "agent.log").read_text()
    return json.loads(json.loads((folder / "output.json").read_text())["report"])


def server_descendants(isolated: bool) -> list[psutil.Process]:
    server = launcher._servers[(None, AGENT, isolated)]
    root = psutil.Process(server.process.pid)
    return (root.children()[0] if isolated else root).children(recursive=True)


async def leftover_sleepers(isolated: bool) -> list[psutil.Process]:
    """The `sleep` processes left among the agent server's descendants, after a few seconds to end (a
    killed process is a zombie until its parent, inside the namespace the server, reaps it)."""
    for _ in range(50):
        sleepers = [p for p in server_descendants(isolated) if p.name() == "sleep"]
        if not sleepers:
            return []
        await asyncio.sleep(0.1)
    return sleepers


async def test_no_way_out_of_the_boundary_reaches_the_machine_but_the_endpoint_does(
    bypass_agent, endpoint, canary, tmp_path
):
    attempts = ["uncover_tmp", *WAYS_OUT, "new_namespace", "endpoint", "sleeper"]
    outcomes = await attempt(tmp_path, endpoint.env, "namespaces", attempts, **canary.addresses)
    assert canary.heard() == set()
    assert outcomes["python_connect"] == "failed: ConnectionRefusedError: [Errno 111] Connection refused"
    if shutil.which("curl"):
        assert outcomes["curl"].startswith("exit 7: curl: (7) Failed to connect to 127.0.0.1 port")
    assert outcomes["wget"] == "exit 4"  # wget: network failure (without wget: python's exit 1)
    assert outcomes["new_interpreter"].endswith("ConnectionRefusedError: [Errno 111] Connection refused")
    assert outcomes["ctypes_connect"] == "refused: Connection refused"
    assert outcomes["udp_sendto"] == "sent"  # into the job's own loopback, where no one listens
    assert outcomes["uncover_tmp"] == "umount /tmp: Operation not permitted"
    assert outcomes["unix_socket"] == "failed: FileNotFoundError: [Errno 2] No such file or directory"
    assert outcomes["new_namespace"] == "unshare: Operation not permitted"
    assert outcomes["endpoint"] == {"python": [200, ["default", "probe"]], "curl": ["default", "probe"]}
    assert outcomes["sleeper"] > 0 and not await leftover_sleepers(isolated=True)  # killed with its job, reaped


async def test_a_job_cannot_touch_the_kernels_settings_nor_regain_capabilities(bypass_agent, endpoint, tmp_path):
    """Issue 49's findings 1 and 5, as a command agent's code would try them (run as root here, as in
    containers and CI): /proc/sys opened for writing, a user namespace of its own and a mount in it."""
    attempts = ["kernel_settings", "regain_capabilities", "identity"]
    outcomes = await attempt(tmp_path, endpoint.env, "namespaces", attempts)
    assert all(said.startswith("failed: OSError: [Errno 30] Read-only file system") for said in
               outcomes["kernel_settings"].values()), outcomes["kernel_settings"]  # fmt: skip
    assert outcomes["regain_capabilities"] == "unshare: Operation not permitted"
    assert outcomes["identity"]["hostname"] == guard.JOB_HOSTNAME and outcomes["identity"]["seccomp"] == ["1", "2"]
    if os.geteuid() == 0:
        assert outcomes["identity"]["uid"] == guard.JOB_ID


async def test_a_job_has_bounded_processes_file_sizes_and_tmpfs(bypass_agent, endpoint, tmp_path):
    """Issue 49's finding 6: 256 forks went unchecked, /tmp and /dev/shm were half the machine's memory."""
    outcomes = await attempt(tmp_path, endpoint.env, "namespaces", ["forks", "sizes"])
    limits = guard.LIMITS
    assert 8 <= outcomes["forks"] < limits["processes"]  # the job's own processes and threads count too
    assert outcomes["sizes"] == {
        "/tmp": limits["tmp_mb"],
        "/dev/shm": limits["shm_mb"],
        "big_file": "failed: OSError: [Errno 27] File too large",
        "written_mb": limits["file_mb"],
    }


async def test_without_the_boundary_the_same_attempts_reach_the_machine(
    bypass_agent, endpoint, canary, tmp_path, monkeypatch
):
    """`isolation = "none"` runs the agent with no boundary, even where none could be made."""
    monkeypatch.setattr(launcher, "boundary_problem", lambda python: "unshare: unshare failed: Operation not permitted")
    attempts = [*WAYS_OUT, "endpoint", "kernel_settings", "regain_capabilities"]
    outcomes = await attempt(tmp_path, endpoint.env, "none", attempts, **canary.addresses)
    assert canary.heard() == set(WAYS_OUT), outcomes
    if os.geteuid() == 0:  # the attempts of test_a_job_cannot_touch_the_kernels_settings... are real
        assert set(outcomes["kernel_settings"].values()) == {"opened for writing"}
    assert outcomes["regain_capabilities"] == "CapEff 000001ffffffffff, mounted a tmpfs"
    assert outcomes["unix_socket"] == "connected"
    assert outcomes["endpoint"] == {"python": [200, ["default", "probe"]], "curl": ["default", "probe"]}


@pytest.mark.parametrize("isolation", ["namespaces", "none"])
def test_a_provider_key_in_the_runs_environment_is_out_of_the_agents_reach(runners, endpoint, tmp_path, isolation):
    """The run's process holds the key from its start (what `/proc/<pid>/environ` shows); the job's own
    environment never has it, and inside the boundary no process's environment that has it is readable."""
    write_job(tmp_path, ["environ"], key=PLANTED_KEY)
    env = {**os.environ, "OPENAI_API_KEY": PLANTED_KEY, "ANTHROPIC_API_KEY": PLANTED_KEY}
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(runners), str(tmp_path), isolation, endpoint.base_url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.split() == ["0"], done.stderr[-2000:]
    seen = json.loads(json.loads((tmp_path / "output.json").read_text())["report"])["environ"]
    assert seen["own"] is False and seen["parent"] is False  # the job's parent is the agent server
    if isolation == "namespaces":
        assert seen["holders"] == []
    else:  # the attempt is real: without the boundary the run's own process gives the key away
        assert len(seen["holders"]) >= 1


async def test_a_machine_that_cannot_make_the_boundary_refuses_external_agents_unless_told_none(monkeypatch, tmp_path):
    monkeypatch.setattr(launcher, "boundary_problem", lambda python: "unshare: unshare failed: Operation not permitted")
    refusal = (
        "pipeline_options.isolation: external agents run inside Linux namespaces (unshare: own network, "
        "processes and filesystem view), which cannot be made here (unshare: unshare failed: Operation not permitted); "
        'set isolation = "none" to run them with no OS boundary'
    )
    with pytest.raises(ConfigError) as refused:
        ExternalOptions(agent="gpt_researcher").check_available()
    assert str(refused.value) == refusal
    ExternalOptions(agent="gpt_researcher", isolation="none").check_available()  # asked for: no refusal

    recipe = parse_recipe(
        {
            "name": "isolation",
            "benchmark": {"name": "sample", "limit": 1},
            "models": {"system": {"model": "scripted"}},
            "systems": [
                {
                    "name": "gptr-bounded",
                    "pipeline": "external",
                    "memory": {"backend": "none"},
                    "pipeline_options": {"agent": "gpt_researcher"},
                },
                {
                    "name": "gptr-unbounded",
                    "pipeline": "external",
                    "memory": {"backend": "none"},
                    "pipeline_options": {"agent": "gpt_researcher", "isolation": "none"},
                },
            ],
            "run": {"out_dir": str(tmp_path / "runs")},
        }
    )
    with pytest.raises(ConfigError) as refused:
        check_systems_available(recipe.systems)
    assert str(refused.value) == f"systems[0] (gptr-bounded): {refusal}"
    check_systems_available(recipe.systems[1:])
    # config.json keeps the recipe as resolved: the unbounded system says so there
    assert recipe.model_dump(mode="json")["systems"][1]["pipeline_options"]["isolation"] == "none"

    servers = dict(launcher._servers)
    env = session_env("http://127.0.0.1:9/v1", "atl-x", "http://127.0.0.1:9/s/x", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="^pipeline_options.isolation: external agents run inside Linux namespaces"):
        await launcher.run_agent_job(
            None, "gpt_researcher", write_job(tmp_path, []), tmp_path / "output.json", tmp_path / "agent.log", env, 30
        )
    assert launcher._servers == servers  # refused before any agent process started


def test_the_probe_says_why_the_boundary_cannot_be_made():
    assert launcher.boundary_problem(None) is None  # this machine makes it (the tests above ran inside it)
    assert launcher.probe_boundary(None, launcher.boundary_command()) is None
    cannot = ["sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1", "--"]
    assert launcher.probe_boundary(None, cannot) == "unshare: unshare failed: Operation not permitted"


# Guards that each leave one thing open (a text edit of guard.py -> what the probe must name)
WEAKENED = {
    "ptrace_allowed": ({'"mount_setattr", "ptrace", ': '"mount_setattr", '}, "ptrace"),
    "nested_user_namespaces": ({'    "unshare", "setns",': '    "setns",'}, "a user namespace"),
    "proc_writable_and_root": (
        {
            "MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)": "MS_NOSUID | MS_NODEV | MS_NOEXEC)",
            "become=JOB_ID if as_job_id else None": "become=None",
        },
        "/proc/sys/kernel/core_pattern opens for writing",
    ),
    "machines_host_name": (
        {
            "CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP": "CLONE_NEWIPC | CLONE_NEWCGROUP",
            '_check(libc.sethostname(hostname, len(hostname)), "sethostname")': "pass",
        },
        "the job shares the machine's host name",
    ),
    "no_seccomp": ({"\n    _install_seccomp(libc)\n": "\n"}, "without no_new_privs and a seccomp filter"),
}


@pytest.mark.parametrize("weakness", sorted(WEAKENED))
def test_the_probe_fails_a_guard_that_leaves_one_thing_open(weakness, tmp_path):
    """The preflight's probe tries each forbidden action: a guard that leaves one open fails it, by name."""
    edits, named = WEAKENED[weakness]
    text = (ROOT / "graphs" / "external" / "child" / "guard.py").read_text()
    for old, new in edits.items():
        assert old in text, f"the edit {old!r} no longer applies to guard.py"
        text = text.replace(old, new)
    weak = tmp_path / "guard.py"
    weak.write_text(text)
    if weakness == "proc_writable_and_root" and os.geteuid() != 0:
        pytest.skip("a job of a run that is not root is never root of the machine")
    problem = launcher.probe_boundary(None, launcher.boundary_command(), guard=weak)
    assert problem is not None and problem.startswith("atelier boundary probe: a job could do what it must not: ")
    assert named in problem, problem
    assert launcher.probe_boundary(None, launcher.boundary_command()) is None  # the real guard holds


def test_an_isolated_agent_reaches_one_endpoint_address():
    assert agents.endpoint_address(
        session_env("http://127.0.0.1:5/v1", "t", "http://127.0.0.1:5/s/x", "http://127.0.0.1:5")
    ) == ("127.0.0.1", 5)
    with pytest.raises(AtelierError, match="it names 127.0.0.1:5, 127.0.0.1:9$"):
        agents.endpoint_address(
            session_env("http://127.0.0.1:5/v1", "t", "http://127.0.0.1:9/s/x", "http://127.0.0.1:5")
        )
    with pytest.raises(AtelierError, match="must be on 127.0.0.1 with a port; its session names example.org:5"):
        agents.endpoint_address(
            session_env("http://example.org:5/v1", "t", "http://example.org:5/s", "http://example.org:5")
        )


class Planted:
    """What a job must not reach, planted on this machine outside /tmp: a recipe with an inline key
    in /var/tmp, a data set's gold file, a file in $HOME, a writable response cache, Unix sockets in
    /dev/shm and /var/tmp; and the places a job would write to."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="atelier-planted-", dir="/var/tmp"))
        self.recipe = self.folder / "recipe.toml"
        self.recipe.write_text(f'api_key = "{PLANTED_KEY}"\n[models.system]\nmodel = "openai/gpt-4o"\n')
        self.gold = self.folder / "data" / "pdr" / "gold.jsonl"
        self.gold.parent.mkdir(parents=True)
        self.gold.write_text('{"gold_need": "the user wants a heat pump for a solid-wall terrace"}\n')
        self.cache = self.folder / "cache" / "llm"
        self.cache.mkdir(parents=True)
        self.home_file = Path.home() / f".{self.folder.name}-bashrc"
        self.home_file.write_text("export OPENAI_API_KEY=sk-home\n")
        self.writes = [
            self.cache / "entry.json",
            Path.home() / f".{self.folder.name}-written",
            Path("/dev/shm") / f"{self.folder.name}-written",
            self.folder / "written",
        ]
        self.listeners = []
        for path in (Path("/dev/shm") / f"{self.folder.name}.sock", self.folder / "x.sock"):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(8)
            listener.setblocking(False)
            self.listeners.append(listener)

    @property
    def reads(self) -> list[str]:
        return [str(self.recipe), str(self.gold), str(self.home_file)]

    @property
    def sockets(self) -> list[str]:
        return [listener.getsockname() for listener in self.listeners]

    def written(self) -> list[str]:
        return [str(path) for path in self.writes if path.exists()]

    def heard(self) -> list[str]:
        said = []
        for listener in self.listeners:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                continue
            with conn:
                said.append(listener.getsockname())
        return said

    def remove(self) -> None:
        for listener in self.listeners:
            path = listener.getsockname()
            listener.close()
            Path(path).unlink(missing_ok=True)
        for path in (*self.writes, self.home_file):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.folder)


@pytest.fixture
def planted():
    things = Planted()
    yield things
    things.remove()


async def run_job(
    folder: Path, env: dict, isolation: str, attempts: list[str], bind=None, **probe
) -> tuple[int | None, dict]:
    await asyncio.to_thread(folder.mkdir, exist_ok=True)
    code = await launcher.run_agent_job(
        None,
        AGENT,
        write_job(folder, attempts, **probe),
        folder / "output.json",
        folder / "agent.log",
        env,
        120,
        isolation,
        bind=bind,
    )
    output = folder / "output.json"
    return code, json.loads(json.loads(output.read_text())["report"]) if output.exists() else {}


async def attack_beside_a_concurrent_job(
    folder: Path, env: dict, isolation: str, planted: Planted, attempts: list[str]
):
    """A job (`victim`) waits while another (`attacker`) tries everything in `attempts` against the
    planted files, sockets, the victim and the agent server; then the victim is released."""
    victim_folder, attacker_folder = folder / "victim", folder / "attacker"
    victim = asyncio.create_task(run_job(victim_folder, env, isolation, ["wait_released"]))
    for _ in range(600):
        if (victim_folder / "started").exists():
            break
        await asyncio.sleep(0.05)
    probe = {
        "read": planted.reads,
        "write": [*map(str, planted.writes), str(attacker_folder / "mine.txt")],
        "sockets": planted.sockets,
        "victim": str(victim_folder),
    }
    code, outcomes = await run_job(attacker_folder, env, isolation, attempts, **probe)
    assert code == 0, (attacker_folder / "agent.log").read_text()
    (victim_folder / "released").touch()
    return outcomes, await victim


async def test_two_concurrent_jobs_cannot_reach_or_use_each_others_session(bypass_agent, endpoint, tmp_path):
    """Issue 49's finding 2: a job (the attacker) beside another (the victim), both forked from one
    agent server, looks for the victim's session token in its own memory (a copy of the server's), its
    parent's, every environment and every file in sight — and, given the token as if it had leaked,
    uses it through its own connection: the endpoint answers it only on the victim's connections."""
    gateway = endpoint.sessions.get(endpoint.env["OPENAI_API_KEY"]).gateway
    sessions = [endpoint.sessions.add(EndpointSession(gateway=gateway, agent=AGENT)) for _ in range(2)]
    web = [endpoint.web_sessions.add(FakeWebSession(s)) for s in sessions]
    victim_session, attacker_session = sessions
    envs = [session_env(endpoint.openai_base, s.token, f"{endpoint.base_url}/s/{s.token}", endpoint.base_url)
            for s in sessions]  # fmt: skip
    for session in sessions:
        endpoint.bindings.require(session.token)
    victim_folder, attacker_folder = tmp_path / "victim", tmp_path / "attacker"
    try:
        victim = asyncio.create_task(
            run_job(victim_folder, envs[0], "namespaces", ["wait_released"], bind=endpoint.bind(victim_session.token))
        )
        for _ in range(600):
            if (victim_folder / "started").exists():
                break
            await asyncio.sleep(0.05)
        code, outcomes = await run_job(
            attacker_folder,
            envs[1],
            "namespaces",
            ["steal_tokens"],
            bind=endpoint.bind(attacker_session.token),
            victim=str(victim_folder),
        )
        # then, as if it had leaked all the same, the victim's token handed to a job of the attacker's session
        used = await run_job(
            tmp_path / "leaked",
            envs[1],
            "namespaces",
            ["use_token"],
            bind=endpoint.bind(attacker_session.token),
            other_token=victim_session.token,
        )
        (victim_folder / "released").touch()
        assert (await victim)[0] == 0
    finally:
        for session, web_session in zip(sessions, web, strict=True):
            endpoint.bindings.release(session.token)
            endpoint.sessions.remove(session)
            endpoint.web_sessions.remove(web_session)
    assert code == 0, (attacker_folder / "agent.log").read_text()
    stolen = outcomes["steal_tokens"]
    assert stolen["own_memory"] == [] and stolen["environ"] == [] and stolen["files"] == [], stolen
    assert stolen["parent_memory"] == [] or stolen["parent_memory"].startswith("failed: PermissionError"), stolen
    assert used == (0, {"use_token": {"own": 200, "own_search": 200, "other": 403, "other_search": 403}})
    # nor do the server's requests name a token: the jobs read theirs from their own relay's folder
    assert victim_session.token not in (victim_folder / "agent.log").read_text()


class FakeWebSession:
    """A web session of the endpoint's (by token) that answers every search with nothing."""

    def __init__(self, session: EndpointSession) -> None:
        self.token = session.token

    async def search(self, query: str) -> list:
        return []


async def test_a_job_reaches_no_file_socket_job_or_server_of_the_machine(bypass_agent, endpoint, planted, tmp_path):
    attempts = ["read", "write", "unix_sockets", "other_job", "agent_server", "signal_init"]
    outcomes, victim = await attack_beside_a_concurrent_job(tmp_path, endpoint.env, "namespaces", planted, attempts)
    assert outcomes["read"] == {path: "failed: FileNotFoundError: [Errno 2] No such file or directory: " + repr(path)
                                for path in planted.reads}  # fmt: skip
    own = str(tmp_path / "attacker" / "mine.txt")
    assert outcomes["write"].pop(own) == "wrote"  # its own folder is writable
    own_shm = str(planted.writes[2])
    assert outcomes["write"].pop(own_shm) == "wrote"  # into the job's own /dev/shm, a tmpfs gone with it
    refusals = ("failed: FileNotFoundError", "failed: OSError: [Errno 30] Read-only file system")
    assert all(said.startswith(refusals) for said in outcomes["write"].values()), outcomes["write"]
    assert planted.written() == []  # nothing reached the machine's cache, $HOME, /dev/shm or /var/tmp
    assert all(said.startswith("failed: FileNotFoundError") for said in outcomes["unix_sockets"].values())
    assert planted.heard() == []
    assert outcomes["other_job"]["pids"] == [] and "killed" not in outcomes["other_job"]
    assert outcomes["other_job"]["by_path"][str(tmp_path / "victim" / "input.json")].startswith(
        "failed: FileNotFoundError"
    )
    assert outcomes["agent_server"] == {"seen": 0, "may_signal": 0}
    # run as root, the job (JOB_ID) may not even signal its init (root of its namespace); else the init ignores it
    assert outcomes["signal_init"] in ("still running", "failed: PermissionError: [Errno 1] Operation not permitted")
    assert victim == (0, {"wait_released": "released"})  # the concurrent job ran on, unharmed
    assert launcher._servers[(None, AGENT, True)].alive


async def test_without_the_boundary_the_job_reaches_every_planted_thing(
    bypass_agent, endpoint, planted, tmp_path, monkeypatch
):
    """The same attempts with `isolation = "none"` reach every target: they are real."""
    attempts = ["read", "write", "unix_sockets", "other_job", "agent_server"]
    outcomes, victim = await attack_beside_a_concurrent_job(tmp_path, endpoint.env, "none", planted, attempts)
    assert outcomes["read"][str(planted.recipe)] == f'api_key = "{PLANTED_KEY}"'
    assert outcomes["read"][str(planted.gold)].startswith('{"gold_need"')
    assert outcomes["read"][str(planted.home_file)] == "export OPENAI_API_KEY=sk-home"
    assert set(outcomes["write"].values()) == {"wrote"}
    assert sorted(planted.written()) == sorted(map(str, planted.writes))
    assert set(outcomes["unix_sockets"].values()) == {"connected"}
    assert sorted(planted.heard()) == sorted(planted.sockets)
    assert outcomes["other_job"]["by_path"][str(tmp_path / "victim" / "input.json")].startswith("{")
    assert outcomes["other_job"]["through_proc"].startswith("{") and outcomes["other_job"]["killed"] == 1
    assert victim[0] == -9  # killed by the other job
    assert outcomes["agent_server"]["may_signal"] >= 1


@pytest.fixture
def tmp_venv(tmp_path_factory):
    """A virtual environment under /tmp (which a job's own /tmp would hide) with a module of its own."""
    folder = Path(tempfile.mkdtemp(prefix="atelier-venv-", dir="/tmp"))
    folder.chmod(0o755)  # as a venv is made (mkdtemp's 0700 would hide it from the job's unprivileged user)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder)], check=True, timeout=120
    )
    python = folder / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "planted_in_venv.py").write_text('SAID = "imported from the venv under /tmp"\n')
    yield python, Path(site)
    with launcher._lock:
        servers = [launcher._servers.pop(key) for key in list(launcher._servers) if key[0] == str(python)]
    for server in servers:
        server.close()
    shutil.rmtree(folder)


async def test_an_agent_in_a_venv_under_tmp_sees_it_read_only(bypass_agent, endpoint, tmp_venv, tmp_path):
    python, site = tmp_venv
    write_job(tmp_path, ["import_planted", "write"], module="planted_in_venv", write=[str(site / "poisoned.py")])
    code = await launcher.run_agent_job(
        str(python), AGENT, tmp_path / "input.json", tmp_path / "output.json", tmp_path / "agent.log", endpoint.env, 120
    )
    assert code == 0, (tmp_path / "agent.log").read_text()
    outcomes = json.loads(json.loads((tmp_path / "output.json").read_text())["report"])
    assert outcomes["import_planted"] == "imported from the venv under /tmp"
    assert outcomes["write"][str(site / "poisoned.py")].startswith("failed: OSError: [Errno 30] Read-only file system")
    assert not (site / "poisoned.py").exists()


COMMAND = """
cat {recipe} 2>&1 | head -1
echo poisoned > {cache} 2>&1 && echo wrote-cache
curl -sS -m 2 http://127.0.0.1:{tcp}/curl >/dev/null 2>&1; echo "curl-exit $?"
curl -sS -m 10 -H "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/models" | head -c 200; echo
read line; echo "stdin: $line"
echo mine > own.txt && echo wrote-own
"""


@pytest.mark.parametrize("isolation", ["namespaces", "none"])
async def test_any_command_runs_in_the_same_boundary(endpoint, canary, planted, tmp_path, isolation):
    """`run_command_job` (how an agent that is a command runs) seals the command as it seals a registry
    agent's job: the endpoint answers; the planted recipe, cache and the machine's loopback are out of
    reach — and, with `isolation = "none"`, each is reached (the attempts are real)."""
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    script = COMMAND.format(recipe=planted.recipe, cache=planted.writes[0], tcp=canary.addresses["tcp"])
    (tmp_path / "stdin.txt").write_text("the job on stdin\n")
    code = await launcher.run_command_job(
        ["sh", "-c", script],
        tmp_path,
        tmp_path / "command.log",
        endpoint.env,
        60,
        isolation,
        stdin_path=tmp_path / "stdin.txt",
        stdout_path=tmp_path / "stdout.txt",
    )
    said = (tmp_path / "stdout.txt").read_text().splitlines()
    assert code == 0, (tmp_path / "command.log").read_text()
    assert '"probe"' in said[-3] and said[-2:] == ["stdin: the job on stdin", "wrote-own"]
    assert (tmp_path / "own.txt").read_text() == "mine\n"
    if isolation == "namespaces":
        assert said[0] == f"cat: {planted.recipe}: No such file or directory"
        assert "wrote-cache" not in said and "curl-exit 7" in said  # 7: could not connect
        assert planted.written() == [] and canary.heard() == set()
    else:
        assert said[0] == f'api_key = "{PLANTED_KEY}"'
        assert "wrote-cache" in said
        assert planted.written() == [str(planted.writes[0])] and canary.heard() == {"curl"}


async def test_a_command_past_its_time_is_killed_with_what_it_started(endpoint, tmp_path):
    started, since = time.perf_counter(), time.time() - 1
    code = await launcher.run_command_job(
        ["sh", "-c", "sleep 300 & sleep 300"], tmp_path, tmp_path / "command.log", endpoint.env, 2
    )
    assert code is None and time.perf_counter() - started < 20
    # this job's sleeps only: another test of this file leaves a `sleep 300` of its own running (the
    # job that outlives its boundary when isolation is off), started before this one
    left = [
        p
        for p in psutil.process_iter(["cmdline", "create_time"])
        if p.info["cmdline"] == ["sleep", "300"] and p.info["create_time"] >= since
    ]
    assert not left


async def test_a_visible_folder_that_holds_the_run_folder_shows_none_of_the_run(bypass_agent, endpoint, tmp_path):
    """A command's working folder (made visible, read-only) may hold the run folder, as a checkout run
    from its own root does: the part that leads to the job's folder is masked, so the job sees the
    folder's own files but no other job, result or recipe under it — and writes only its own folder."""
    checkout = tmp_path / "checkout"
    (checkout / "runs" / "out" / "other-run").mkdir(parents=True)
    (checkout / "runs" / "out" / "other-run" / "results.jsonl").write_text('{"secret": "another run"}\n')
    (checkout / "README.md").write_text("the agent's own checkout\n")
    job = checkout / "runs" / "out" / "this-run" / "external" / "sys" / "case"
    job.mkdir(parents=True)
    reads = [str(checkout / "README.md"), str(checkout / "runs" / "out" / "other-run" / "results.jsonl")]
    write_job(job, ["read", "write"], read=reads, write=[str(checkout / "planted.txt"), str(job / "mine.txt")])
    code = await launcher.run_agent_job(
        None, AGENT, job / "input.json", job / "output.json", job / "agent.log", endpoint.env, 120,
        read_only=[str(checkout)],
    )  # fmt: skip
    assert code == 0, (job / "agent.log").read_text()
    outcomes = json.loads(json.loads((job / "output.json").read_text())["report"])
    assert outcomes["read"][reads[0]] == "the agent's own checkout"
    assert outcomes["read"][reads[1]].startswith("failed: FileNotFoundError")
    assert outcomes["write"][str(checkout / "planted.txt")].startswith("failed: OSError: [Errno 30] Read-only")
    assert outcomes["write"][str(job / "mine.txt")] == "wrote"
    assert not (checkout / "planted.txt").exists()


def test_a_visible_path_that_holds_home_is_refused():
    from atelier.graphs.external.child import guard

    with pytest.raises(guard.BoundaryError, match=r"holds .*: give the agent a folder of its own"):
        guard._plan(["/var/tmp/job"], [str(Path.home().parent)])
