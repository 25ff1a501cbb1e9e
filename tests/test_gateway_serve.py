"""`atelier gateway serve` end to end: a real process serving the gateway to any OpenAI client,
with the sandbox web's SearXNG search beside it, writing its ledger — and sealed: the API key
required, the Host header and Origin checked, bodies capped as they stream in, loopback only."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from atelier.runs.cli.gateway import TOKEN_ENV, checked_host, checked_token

ROOT = Path(__file__).resolve().parent.parent
ASK = {"model": "final_report", "messages": [{"role": "user", "content": "Hello there, write."}]}


@contextlib.contextmanager
def _serve(*args: str, env: dict[str, str] | None = None):
    """A `gateway serve` process; yields it with its base URL (…/v1) and the lines it printed first."""
    command = [
        sys.executable,
        "-m",
        "atelier.runs.cli",
        "gateway",
        "serve",
        "--model",
        "scripted",
        "--port",
        "0",
        *args,
    ]
    full_env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV} | {"PYTHONUNBUFFERED": "1"} | (env or {})
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=ROOT
    )
    try:
        first = process.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", first)
        assert found, f"no URL in {first!r}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
        _wait_until_served(found.group(1))
        yield process, found.group(1), [first, process.stdout.readline()]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def _wait_until_served(base: str) -> None:
    """The URL is printed once the socket is bound; uvicorn listens on it a moment later."""
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/models", timeout=5)
            return
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_gateway_serve_answers_openai_clients_and_writes_a_ledger(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    with _serve("--ledger", str(ledger), "--no-cache", "--web", "--role", "final_report=writer") as (
        process,
        base,
        lines,
    ):
        token = re.fullmatch(r"API key: (atl-\S+)\n", lines[1]).group(1)  # generated, printed once
        search = re.search(r"(http://\S+/search)", process.stdout.readline()).group(1).replace("<api-key>", token)
        client = openai.OpenAI(base_url=base, api_key=token, max_retries=0)
        answer = client.chat.completions.create(**ASK)
        found = httpx.get(search, params={"q": "laptop", "format": "json"}, timeout=30).json()
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="anything", max_retries=0).chat.completions.create(**ASK)
    assert answer.choices[0].message.content.startswith("DRY RUN")
    assert found["results"] and all(r["citable_url"] for r in found["results"])
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["node"], e["role"], e["system"], e["run_id"]) for e in entries] == [
        ("gateway:final_report", "writer", "gateway", "gateway")
    ]


TOKEN = "test-token-0123456789abcdef"
CAP = 64 * 1024


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """A server with its token from the environment and a 64 KiB body cap: (base URL, port, ledger)."""
    ledger = tmp_path_factory.mktemp("sealed") / "ledger.jsonl"
    with _serve("--ledger", str(ledger), "--no-cache", "--max-body-bytes", str(CAP), env={TOKEN_ENV: TOKEN}) as (
        process,
        base,
        lines,
    ):
        assert TOKEN not in "".join(lines)  # a key the user gave is not echoed
        yield base, int(re.search(r":(\d+)/v1", base).group(1)), ledger


def _post(base: str, *, token: str | None = TOKEN, **kwargs) -> httpx.Response:
    headers = kwargs.pop("headers", {}) | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(f"{base}/chat/completions", headers=headers, timeout=30, **kwargs)


def test_serve_requires_the_api_key(sealed):
    base, _, _ = sealed
    assert _post(base, token=None, json=ASK).status_code == 401
    assert _post(base, token="atl-not-the-key-000000", json=ASK).status_code == 401
    assert httpx.get(f"{base}/models", timeout=30).status_code == 401
    answered = _post(base, json=ASK)
    assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"].startswith("DRY RUN")


def test_serve_answers_only_its_own_host_names(sealed):
    base, port, _ = sealed
    refused = _post(base, json=ASK, headers={"Host": "evil.example"})
    assert refused.status_code == 403 and "evil.example" in refused.json()["error"]["message"]
    assert _post(base, json=ASK, headers={"Host": f"evil.example:{port}"}).status_code == 403
    for name in ("localhost", "127.0.0.1", "[::1]"):
        assert _post(base, json=ASK, headers={"Host": f"{name}:{port}"}).status_code == 200


def test_serve_refuses_a_cross_site_page(sealed):
    base, _, _ = sealed
    # a web page's form-like POST: text/plain needs no CORS preflight, so only the Origin tells it
    simple = {"content": json.dumps(ASK), "headers": {"Content-Type": "text/plain", "Origin": "http://evil.example"}}
    refused = _post(base, **simple)
    assert refused.status_code == 403 and "evil.example" in refused.json()["error"]["message"]
    assert _post(base, token=None, **simple).status_code == 403
    assert _post(base, json=ASK, headers={"Origin": "null"}).status_code == 403
    assert _post(base, json=ASK, headers={"Origin": "http://localhost:5173"}).status_code == 200


def _raw_response(port: int, head: str, chunks: list[bytes]) -> bytes:
    """Send a request head and some body bytes, never the body's end, then read the answer. The
    server may answer and close while bytes are still being sent: the sending then stops."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(head.encode())
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection after answering: its answer is still to be read
        answer = b""
        while True:  # to the end: the server closes the connection after such an answer
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # the unread rest of our body makes the close a reset
                break
            if not data:
                break
            answer += data
        return answer


def test_serve_caps_a_streamed_body_without_waiting_for_its_end(sealed):
    base, port, ledger = sealed
    entries_before = ledger.read_text().count("\n") if ledger.exists() else 0
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 8192
    chunks = [b"%x\r\n" % len(piece) + piece + b"\r\n"] * (2 * CAP // len(piece))  # twice the cap, then nothing
    answer = _raw_response(port, head, chunks)
    # answered while the body was still coming: the server stopped reading at the cap
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"over the endpoint's limit of 65536 bytes" in answer
    # a declared length over the cap is refused before any of it is read
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {300 * 2**20}\r\n\r\n"
    )
    declared = _raw_response(port, head, [])
    assert declared.startswith(b"HTTP/1.1 413") and b"limit of 65536 bytes" in declared
    assert (ledger.read_text().count("\n") if ledger.exists() else 0) == entries_before  # no model was asked
    assert _post(base, content=json.dumps(ASK).encode()).status_code == 200  # a body under the cap is served


def test_serve_refuses_a_body_a_server_cannot_read_as_json_in_one_400(sealed):
    base, _, ledger = sealed
    huge_int = b'{"model": "final_report", "messages": [], "n": ' + b"9" * 5000 + b"}"
    answer = _post(base, content=huge_int, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "Exceeds the limit (4300 digits)" in answer.json()["error"]["message"]
    broken = json.dumps(ASK).encode().replace(b"Hello", b"H\xff\xfello")
    answer = _post(base, content=broken, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("the request body is not UTF-8")


@pytest.mark.battery  # waits out the server's body deadline
def test_serve_times_out_a_trickling_body_and_lets_an_abandoned_one_go_quietly():
    with _serve("--no-cache", "--body-timeout-s", "2", env={TOKEN_ENV: TOKEN}) as (process, base, _):
        port = int(re.search(r":(\d+)/v1", base).group(1))
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head.encode())
            answer = b""
            sock.settimeout(0.5)
            while time.monotonic() - started < 20 and not answer:
                try:
                    sock.sendall(b" ")  # one byte every half second: the body never completes
                    answer = sock.recv(65536)
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
            sock.settimeout(5)
            with contextlib.suppress(OSError):
                while data := sock.recv(65536):  # the rest of the answer, to the server's close
                    answer += data
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"did not arrive within 2 s" in answer and time.monotonic() - started < 10
        for _ in range(5):  # clients that send half a body and leave
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(head.encode() + b'{"model": "final_')
        time.sleep(1)
        assert _post(base, json=ASK).status_code == 200  # the server goes on
    stderr = process.stderr.read()
    assert "Traceback" not in stderr and "ClientDisconnect" not in stderr, stderr[-2000:]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0: not a loopback address"),
        (["--host", "192.0.2.7"], "--host 192.0.2.7: not a loopback address"),
        (["--token", "short"], "--token"),
        (
            ["--model", "scripted?latency_ms=inf"],
            "--model: 'scripted?latency_ms=inf': latency_ms: Input should be a finite",
        ),
    ],
)
def test_serve_refuses_bad_flags_in_one_line(flags, said):
    finished = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "gateway", "serve", "--port", "0", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != TOKEN_ENV},
    )
    assert finished.returncode == 2 and finished.stdout == ""  # refused before anything is served
    assert finished.stderr.count("\n") == 1 and said in finished.stderr
    if flags[0] == "--host":
        assert "--public" in finished.stderr


def test_the_host_check_passes_loopback_and_public_hosts():
    from atelier.benchmarks.common.errors import ConfigError

    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        checked_host(host, public=False)
    checked_host("0.0.0.0", public=True)
    with pytest.raises(ConfigError, match="--public"):
        checked_host("::", public=False)


def test_the_api_key_is_generated_or_checked():
    from atelier.benchmarks.common.errors import ConfigError

    generated, made = checked_token(None)
    assert made and generated.startswith("atl-") and len(generated) >= 30 and generated != checked_token(None)[0]
    assert checked_token(TOKEN) == (TOKEN, False)
    for weak in ("", "short", "has spaces in it, sixteen+", "slash/in/the/token/please"):
        with pytest.raises(ConfigError, match="--token"):
            checked_token(weak)
