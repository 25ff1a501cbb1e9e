"""A real multi-node Ray cluster on this machine, for tests: each node is its own `ray start --block`
process tree (a head, then workers), on its own loopback address (127.0.0.2, 127.0.0.3, ...) so
Ray keeps all traffic on loopback, with free ports. A node can be killed like a machine that dies.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
# a dead node is noticed within ~3 s instead of Ray's default ~30 s
FAST_FAILURE_DETECTION = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


# for the cluster and every driver of it: no usage reports; no token authentication on this loopback-only
# cluster (Ray turns it on when a token file exists, e.g. after a one-machine `ray.init()`, and then a
# worker node started without the token cannot join)
DRIVER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Node:
    ip: str
    process: subprocess.Popen
    log: Path

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


class LocalRayCluster:
    def __init__(self, cpus_per_node: int = 2) -> None:
        self.cpus = cpus_per_node
        self.temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must stay short
        self.env = {**os.environ, **DRIVER_ENV, **FAST_FAILURE_DETECTION}
        self.nodes: list[Node] = []
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.2:{self.port}"

    def _start(self, ip: str, args: list[str]) -> Node:
        log = self.temp / f"node-{ip}.log"
        process = subprocess.Popen(
            [
                RAY,
                "start",
                "--block",
                "--node-ip-address",
                ip,
                "--num-cpus",
                str(self.cpus),
                "--dashboard-agent-listen-port",
                str(free_port()),
                "--disable-usage-stats",
                *args,
            ],
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        node = Node(ip, process, log)
        self.nodes.append(node)
        return node

    def start_head(self) -> None:
        self.port = free_port()
        self._start(
            "127.0.0.2",
            [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard=false",
                "--dashboard-port",
                str(free_port()),
                "--ray-client-server-port",
                str(free_port()),
                "--temp-dir",
                str(self.temp),
            ],
        )

    def add_worker(self) -> Node:
        return self._start(f"127.0.0.{len(self.nodes) + 2}", ["--address", self.address])

    def wait_for(self, nodes: int, timeout: float = 240) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.process.poll() is not None:
                    raise RuntimeError(f"ray node {node.ip} exited:\n{node.log.read_text()[-3000:]}")
            try:
                if not ray.is_initialized():
                    ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
                if sum(n["Alive"] for n in ray.nodes()) >= nodes:
                    return
            except (ConnectionError, RuntimeError):
                pass
            time.sleep(1)
        raise TimeoutError(f"the Ray cluster did not reach {nodes} nodes in {timeout} s")

    def kill(self, node: Node) -> None:
        """SIGKILL the node's whole process tree (raylet, agents, its workers): a machine that dies."""
        victims = node.processes()
        for process in victims:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=30)

    def stop(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(self.nodes):
            self.kill(node)
        shutil.rmtree(self.temp, ignore_errors=True)
