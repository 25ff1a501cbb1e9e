"""`atelier view`'s server holds against rebinding, links and framing: it answers only a Host that
names its loopback address (a DNS-rebinding page gets 403), refuses a non-loopback --host without
--public, serves only regular files of the run folder (a report.html linked to /proc/self/environ or
/dev/zero, or a FIFO in its place, is refused) and sends its CSP and frame headers on every answer —
under which the page's own script still works in a real browser."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLANTED = "sk-viewer-planted-0f1e2d3c4b5a69788796"


def atelier(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view-server")
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp / "cache")}
    folder = tmp / "run"
    done = atelier(
        "run", "runs/recipes/quickstart.toml", "--limit", "1", "--no-progress", "--out", str(folder), env=env
    )
    assert done.returncode == 0, done.stderr
    return folder, env


def client_for(folder: Path, hosts: frozenset[str] | None):
    from starlette.testclient import TestClient

    from atelier.runs.reading.view_server import view_app

    return TestClient(view_app(folder, hosts), base_url="http://127.0.0.1:8765")


def test_only_the_bound_loopback_host_is_answered(run):
    from atelier.agents.models.openai_api import loopback_hosts

    folder, _ = run
    client = client_for(folder, loopback_hosts(8765))
    assert client.get("/index.html").status_code == 200
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.nip.io:8765", "127.0.0.1:9999"):
        refused = client.get("/index.html", headers={"Host": host})
        assert refused.status_code == 403 and "is not this server's address" in refused.text, host
        assert 'class="episode"' not in refused.text
    page = next((folder / "view" / "episodes").iterdir(), None) if (folder / "view").exists() else None
    if page is not None:
        assert client.get(f"/episodes/{page.name}", headers={"Host": "evil.example"}).status_code == 403
    assert client.get("/index.html", headers={"Origin": "http://evil.example"}).status_code == 403


def test_every_answer_forbids_framing_and_loading_from_elsewhere(run):
    from atelier.agents.models.openai_api import loopback_hosts

    folder, _ = run
    client = client_for(folder, loopback_hosts(8765))
    for path, host, status in (
        ("/index.html", "127.0.0.1:8765", 200),
        ("/report.html", "127.0.0.1:8765", 200),
        ("/episodes/none.html", "127.0.0.1:8765", 404),
        ("/index.html", "evil.example", 403),
    ):
        answer = client.get(path, headers={"Host": host})
        assert answer.status_code == status, path
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "connect-src 'none'" in policy and "default-src 'none'" in policy
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero", "outside", "fifo", "dangling"])
def test_report_html_is_served_only_as_a_regular_file_of_the_run_folder(run, tmp_path, monkeypatch, target):
    monkeypatch.setenv("VIEWER_TEST_API_KEY", PLANTED)  # in the server's environment, as a provider key would be
    folder, _ = run
    report = folder / "report.html"
    kept = tmp_path / "report.html"
    shutil.copy(report, kept)
    report.unlink()
    try:
        if target == "fifo":
            os.mkfifo(report)
        elif target == "outside":
            (tmp_path / "secret.html").write_text(f"<p>{PLANTED}</p>")
            report.symlink_to(tmp_path / "secret.html")
        elif target == "dangling":
            report.symlink_to(tmp_path / "nothing-here.html")
        else:
            report.symlink_to(target)
        started = time.perf_counter()
        answer = client_for(folder, None).get("/report.html")
        assert time.perf_counter() - started < 10
        assert answer.status_code == 403 and PLANTED not in answer.text
        assert ("is a symbolic link" if target != "fifo" else "is a FIFO") in answer.text
    finally:
        report.unlink()
        shutil.copy(kept, report)


def test_a_host_beyond_loopback_needs_public(run):
    folder, env = run
    done = atelier("view", str(folder), "--host", "0.0.0.0", env=env, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: --host 0.0.0.0: not a loopback address; the view shows every prompt and answer of the run, "
        "so serving beyond this machine needs --public"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_running_server_refuses_a_rebinding_host_and_its_page_works_under_its_policy(run, tmp_path):
    folder, env = run
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "atelier.runs.cli", "view", str(folder), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)

        def get(host: str) -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/index.html", headers={"Host": host})
            answer = conn.getresponse()
            return answer.status, answer.read().decode()

        assert get(f"127.0.0.1:{port}")[0] == 200
        assert get(f"localhost:{port}")[0] == 200
        status, body = get(f"rebound.example:{port}")
        assert status == 403 and 'class="episode"' not in body
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            pytest.skip("chromium is not installed (apt-get install -y chromium)")
        import lxml.html

        config = __import__("json").loads((folder / "config.json").read_text())
        url = f"http://127.0.0.1:{port}/index.html?system=direct-none"
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        doc = lxml.html.fromstring(dom)
        shown = [tr.get("data-system") for tr in doc.xpath('//tr[@class="episode"]') if tr.get("hidden") is None]
        assert shown == ["direct-none"] and len(config["cases"]) == 1  # the page's inline script ran and filtered
    finally:
        server.terminate()
        server.wait(10)
