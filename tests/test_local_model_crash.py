"""A local model server that dies, or a llama.cpp this machine cannot run, fails at once and by name.

Issue 39: on VMs that advertise AMX (or AVX-512) without enabling it, a llama.cpp built for the build
machine's CPU dies on its first completion; the run then waited out timeouts against a socket the
parent still held. Here the death is real (a signal), planted where the issue saw it: in the server
child mid-call, and in the first completion of every process (a `sitecustomize` that makes llama.cpp's
completion raise SIGSEGV or hang).
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.local_model import (
    FEATURE_FLAGS,
    NOT_PORTABLE,
    LocalModelError,
    LocalServerDied,
    amx_granted,
    built_features,
    cpu_flags,
    cpu_problems,
    parse_local_model,
    probe,
)
from atelier.agents.models.settings import ModelSettings
from tests.test_local_model import INSTALLED

ROOT = Path(__file__).resolve().parent.parent
ATELIER = [sys.executable, "-m", "atelier.runs.cli"]
needs_model = pytest.mark.skipif(
    not INSTALLED and os.environ.get("ATELIER_REQUIRE_LOCAL_MODEL") != "1", reason="the local extra is not installed"
)


def llama_logs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "atelier-llama-*")))


def planted(tmp_path: Path, behaviour: str) -> dict[str, str]:
    """An environment whose Python processes' llama.cpp completion (the engine's token loop) dies of
    SIGSEGV or hangs."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal, time\n"
        "from atelier.agents.models import llama_engine\n"
        "def broken(self, *args, **kwargs):\n"
        + ("    os.kill(os.getpid(), signal.SIGSEGV)\n" if behaviour == "crash" else "    time.sleep(3600)\n")
        + "llama_engine.Engine._generate = broken\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


# ----------------------------------------------------------------------------- the instruction sets


INFO = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 |"


def test_the_system_info_is_read_as_llama_cpp_prints_it():
    assert built_features(INFO) == {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP"}
    assert built_features("CPU : AVX2 = 1 | AVX512 = 0 |") == {"AVX2"}
    assert cpu_flags("processor : 0\nflags : fpu pni avx2 amx_tile\n") == {"fpu", "pni", "avx2", "amx_tile"}


def test_a_build_with_amx_fails_where_the_kernel_grants_no_tile_state():
    amx = INFO + " AMX_INT8 = 1 |"
    flags = {"pni", "ssse3", "avx", "avx2", "f16c", "fma", "bmi2", "amx_int8", "amx_tile"}
    assert cpu_problems(amx, flags, amx_ok=True) == []
    assert cpu_problems(amx, flags, amx_ok=False) == ["AMX_INT8 (the kernel grants no AMX tile state to processes)"]
    assert cpu_problems(amx, flags - {"amx_int8"}, amx_ok=True) == ["AMX_INT8 (no 'amx_int8' in /proc/cpuinfo)"]
    assert cpu_problems(INFO + " AVX512 = 1 |", flags, amx_ok=True) == ["AVX512 (no 'avx512f' in /proc/cpuinfo)"]


@given(built=st.sets(st.sampled_from(sorted(FEATURE_FLAGS))), present=st.sets(st.sampled_from(sorted(FEATURE_FLAGS))))
def test_every_built_instruction_set_the_machine_lacks_is_named(built, present):
    info = "CPU : " + " | ".join(f"{name} = 1" for name in sorted(built)) + " | LLAMAFILE = 1 |"
    flags = {FEATURE_FLAGS[name] for name in present}
    problems = cpu_problems(info, flags, amx_ok=True)
    assert [p.split(" ")[0] for p in problems] == sorted(built - present)


@needs_model
def test_the_installed_llama_cpp_uses_only_instructions_this_machine_enables_and_no_vm_can_fake():
    """The build README installs is portable (no AVX-512, no AMX: VMs advertise them without enabling
    them), and everything it uses this CPU and kernel enable."""
    result = probe(parse_local_model("local/smollm2"))
    built = built_features(result.system_info)
    assert {"AVX2", "FMA", "F16C"} <= built or "avx2" not in cpu_flags()  # the portable x86-64 baseline
    assert built & set(NOT_PORTABLE) == set(), result.system_info
    assert cpu_problems(result.system_info, cpu_flags(), amx_granted()) == []
    assert result.text.strip()  # it answered


# ----------------------------------------------------------------------------- a dead server


@needs_model
async def test_a_server_killed_mid_call_fails_that_call_and_the_next_at_once_by_name(tmp_path):
    before = llama_logs()
    ledger = Ledger(tmp_path / "ledger.jsonl")
    gateway = Gateway({"system": ModelSettings(model="local/smollm2", max_tokens=400, timeout_s=120)}, ledger=ledger)
    try:
        assert await gateway.text("system", [{"role": "user", "content": "Say hi."}])
        [server] = gateway._local.values()

        async def kill_soon() -> float:
            await asyncio.sleep(0.5)
            os.kill(server.pid, signal.SIGKILL)
            return time.monotonic()

        killer = asyncio.create_task(kill_soon())
        with pytest.raises(LocalServerDied, match=r"died of signal SIGKILL") as died:
            await gateway.text("system", [{"role": "user", "content": "Write a very long story about a lighthouse."}])
        assert time.monotonic() - await killer < 10  # not 120 s x 5 attempts
        assert f"pid {server.pid}" in str(died.value)
        started = time.monotonic()
        with pytest.raises(LocalServerDied, match="SIGKILL"):
            await gateway.text("system", [{"role": "user", "content": "And again?"}])
        assert time.monotonic() - started < 1.0
        with pytest.raises(ConnectionRefusedError), socket.create_connection((server.host, server.port), timeout=2):
            pass  # nobody holds the listening socket of a dead server
        lines = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
        assert [(e["status"], e["attempts"]) for e in lines] == [("ok", 1), ("error", 1), ("error", 1)]
    finally:
        await gateway.aclose()
    assert llama_logs() == before  # the server's log was never a named file


@pytest.mark.battery  # a real local-model run, its server killed
@needs_model
def test_a_run_whose_server_is_killed_ends_within_seconds_with_exit_3_naming_it(tmp_path):
    before = llama_logs()
    out = tmp_path / "run"
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.Popen(
        [*ATELIER, "run", "runs/recipes/quickstart.toml", "--model", "local/smollm2", "--limit", "2"]
        + ["--out", str(out), "--no-progress", "--concurrency", "4"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        server = None
        while server is None and time.monotonic() < deadline and run.poll() is None:
            ledger = out / "ledger.jsonl"
            if ledger.exists() and any('"status":"ok"' in line for line in ledger.read_text().splitlines()):
                children = psutil.Process(run.pid).children(recursive=True)
                server = next((c for c in children if "--probe" not in " ".join(c.cmdline())), None)
            time.sleep(0.2)
        assert server is not None, "no model call was answered"
        server.kill()
        killed = time.monotonic()
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 3, stderr[-2000:]
    assert time.monotonic() - killed < 60
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    failed = [r for r in results if r["status"] == "error"]
    assert failed and all("local model server" in r["error"] and "SIGKILL" in r["error"] for r in failed)
    assert "local model server" in stdout + stderr
    assert llama_logs() == before


# ----------------------------------------------------------------------------- preflight


@pytest.mark.battery  # a local model server that crashes
@needs_model
def test_preflight_refuses_a_local_model_that_crashes_on_its_first_completion(tmp_path):
    out = tmp_path / "run"
    started = time.monotonic()
    done = subprocess.run(
        [*ATELIER, "run", "runs/recipes/quickstart.toml", "--model", "local/smollm2", "--limit", "1"]
        + ["--out", str(out), "--no-progress"],
        cwd=ROOT,
        env={**planted(tmp_path, "crash"), "ATELIER_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert time.monotonic() - started < 60
    assert "died of signal SIGSEGV" in done.stderr and "first completion" in done.stderr
    assert "AVX2, FMA and F16C" in done.stderr  # what the prebuilt llama.cpp needs, and what to do instead
    assert "Traceback" not in done.stdout
    assert "Traceback" not in done.stderr
    assert not (out / "results.jsonl").exists()


@pytest.mark.battery  # waits out the probe's bound
@needs_model
def test_the_probe_of_a_hanging_model_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", planted(tmp_path, "hang")["PYTHONPATH"])
    started = time.monotonic()
    with pytest.raises(LocalModelError, match="gave no completion within 5 s"):
        probe(parse_local_model("local/smollm2"), timeout_s=5)
    assert time.monotonic() - started < 15
