"""Issue 49's smaller findings (item 7), each as the probe that found it: look-alike and invisible
characters in system names; `gateway serve`'s key on its command line; a gateway held by trickling
bodies and idle half-sent headers; bidi controls a model writes reordering the report and the
viewer. (The label page's headers: tests/test_label_page.py; data downloads' redirects and deadline:
tests/test_data_download.py.)"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli import main
from atelier.runs.folder.recipe import parse_recipe
from tests.test_gateway_serve import ROOT, TOKEN, _serve
from tests.test_run_folder_links import RECIPE
from tests.test_small_boundaries import systems


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("gpt-r\u0435searcher", "Cyrillic letter 'е' (U+0435)"),
        ("\u03bfdr-full", "Greek letter 'ο' (U+03BF)"),
        ("Сист\u0065ма", "Latin letter 'e' (U+0065)"),
        ("\u0455\u0441\u043e\u0440\u0435", "Cyrillic letters that each look like a Latin one: it reads as 'scope'"),
        ("\u0440\u0430\u0441\u0435-\u0445", "reads as 'pace-x'"),
        ("odr\u034f", "do not show (U+034F)"),
        ("odr\ufe0f", "do not show (U+FE0F)"),
        ("\u115fodr", "do not show (U+115F)"),
    ],
)
def test_a_system_name_with_look_alike_or_invisible_letters_is_refused(name, said):
    with pytest.raises(ConfigError) as refused:
        parse_recipe(systems(name, "other"))
    assert said in str(refused.value) and "systems[0]" in str(refused.value)


@pytest.mark.parametrize(
    "name", ["Система", "日本語のシステム", "bm25-λ0.5", "café-direct", "прямой", "ΑΒΓ-1", "ἀρχή", "οδρ"]
)
def test_names_in_one_script_or_with_letters_that_pass_for_none_are_kept(name):
    assert parse_recipe(systems(name)).systems[0].name == name


def test_the_gateway_key_never_is_on_its_command_line(tmp_path):
    """Every user of the machine reads /proc/<pid>/cmdline: a key given there is refused; one from
    $ATELIER_GATEWAY_TOKEN or --token-file is required of clients and shows in no command line."""
    import subprocess

    refused = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "gateway", "serve", "--model", "scripted", "--token", TOKEN],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--token-file" in refused.stderr
    key_file = tmp_path / "key"
    key_file.write_text(TOKEN + "\n")
    with _serve("--ledger", str(tmp_path / "ledger.jsonl"), "--no-cache", "--token-file", str(key_file)) as (
        process,
        base,
        lines,
    ):
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline and TOKEN not in "".join(lines)
        assert httpx.get(f"{base}/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
        assert (
            httpx.get(f"{base}/models", headers={"Authorization": "Bearer atl-other-000000000000"}).status_code == 401
        )


def _wait_closed(conn: socket.socket, seconds: float) -> bytes | None:
    """What the server said before closing `conn` (b"" for nothing), or None if still open after `seconds`."""
    conn.settimeout(0.2)
    said = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data = conn.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return said
        if not data:
            return said
        said += data
    return None


def test_the_gateway_drops_trickling_bodies_and_idle_half_sent_headers(tmp_path):
    """50 clients trickle a body a byte at a time and 20 send half a request's headers and wait: each
    is answered 408 or closed, and a client asking meanwhile is answered."""
    flags = ("--no-cache", "--ledger", str(tmp_path / "l.jsonl"), "--body-timeout-s", "1", "--header-timeout-s", "1")
    with _serve(*flags, env={"ATELIER_GATEWAY_TOKEN": TOKEN}) as (_, base, _lines):
        port = int(base.rsplit(":", 1)[1].split("/")[0])
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        ).encode()
        trickling = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        for conn in trickling:
            conn.sendall(head + b"{")
        half = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for conn in half:
            conn.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        for _ in range(5):  # the trickle goes on, a byte per connection every 0.2 s
            for conn in trickling:
                try:
                    conn.sendall(b" ")
                except OSError:
                    pass  # already dropped
            time.sleep(0.2)
        asked = httpx.get(f"{base}/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        ends = [_wait_closed(conn, 20) for conn in trickling + half]
        for conn in trickling + half:
            conn.close()
    assert asked.status_code == 200
    assert all(end is not None for end in ends), f"{ends.count(None)} connections still held"
    assert all(end.startswith(b"HTTP/1.1 408") for end in ends[:50]), {end[:40] for end in ends[:50]}
    assert all(end == b"" for end in ends[50:])  # half-sent headers: closed without an answer


def test_bidi_controls_in_an_answer_are_written_out_in_the_report_and_the_viewer(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "recipe.toml").write_text(RECIPE)
    run = tmp_path / "run"

    def atelier(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["atelier", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        return exited.value.code or 0

    atelier("run", str(tmp_path / "recipe.toml"), "--no-progress", "--out", str(run))
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    for result in results:  # the answer a model wrote: "evil", then text shown reversed
        result["response"]["text"] = "The answer is \u202eTXT.EXE\u202c, see \u2067this\u2069."
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    atelier("report", str(run))
    atelier("view", str(run), "--static", str(tmp_path / "view"))
    pages = [run / "report.html", *sorted((tmp_path / "view").rglob("*.html"))]
    shown = [p for p in pages if "TXT.EXE" in p.read_text()]
    assert shown, "the answer is on no page: the test would prove nothing"
    for page in pages:
        text = page.read_text()
        assert not any(c in text for c in "\u202e\u202c\u2067\u2069"), page
    assert any("[U+202E]TXT.EXE[U+202C]" in p.read_text() for p in shown)
