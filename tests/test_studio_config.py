"""`atelier studio` (issue 53): a langgraph.json that serves Atelier's graphs and plugin pipelines from
any install, naming no file of the checkout; a plugin's graph served under `langgraph dev` without
Atelier's own graphs beside it runs (it failed with `BlockingError: Blocking call to os.readlink` /
`os.getcwd` on its first node); and docs/studio.md's example of an episode's context runs as written.
The servers start in a folder outside the checkout, with the example plugin installed by entry point."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from atelier.graphs.studio_config import GRAPHS_MODULE, SHIPPED, write_studio_config
from atelier.runs.cli import app

ROOT = Path(__file__).resolve().parents[1]
MYLAB = ROOT / "examples" / "mylab"
CASE = {"benchmark": "sample", "case_id": "q01"}


def test_the_checkouts_langgraph_json_serves_what_atelier_studio_serves():
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert tuple(config["graphs"]) == SHIPPED


def test_the_written_config_names_no_checkout_file_and_every_graph(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(MYLAB))
    config = write_studio_config(
        tmp_path / "studio", {"mine": "mylab.graphs:build", "2-bad name": "mylab.graphs:build"}
    )
    served = json.loads(config.read_text())["graphs"]
    module = (tmp_path / "studio" / GRAPHS_MODULE).resolve()
    assert list(served)[: len(SHIPPED)] == list(SHIPPED) and {"mine", "2-bad name"} <= set(served)
    assert all(target.startswith(f"{module}:") for target in served.values())  # absolute: any working folder
    assert str(ROOT) not in config.read_text()  # Atelier's graphs come from the installed package
    source = module.read_text()
    assert "from atelier.graphs.studio import *" in source.splitlines()[4]  # first: the warm-up before any graph
    assert re.search(r"^graph_2_bad_name = pipeline_graph\('mylab.graphs:build'\)$", source, re.MULTILINE)
    compile(source, str(module), "exec")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--graph", "mine"], "give NAME=module:attr"),
        (["--graph", "episode=mylab.graphs:build"], "a graph named 'episode' is served already"),
        (["--graph", "x=nolab.graphs:build"], "cannot import module 'nolab.graphs'"),
    ],
)
def test_a_bad_graph_is_refused_in_one_line(tmp_path, args, message):
    result = CliRunner().invoke(app, ["studio", str(tmp_path / "s"), *args])
    assert result.exit_code != 0 and message in str(result.exception)


def test_docs_studio_md_shows_the_example_as_the_file_holds_it():
    page = (ROOT / "docs" / "studio.md").read_text()
    [block] = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert block.strip() in (ROOT / "docs" / "examples" / "studio_context.py").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(config: Path, cwd: Path, env: dict[str, str]):
    port = _free_port()
    log = open(cwd / f"server-{port}.log", "w")  # closed with the server (_stop)
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "langgraph"), "dev", "--config", str(config), "--port", str(port)]
        + ["--no-browser", "--no-reload"],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 240
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                return server, base, log
        except httpx.HTTPError:
            time.sleep(0.5)
        if server.poll() is not None:
            break
    server.terminate()
    log.close()
    pytest.fail(f"langgraph dev did not start: {(cwd / f'server-{port}.log').read_text()[-2000:]}")


def _stop(server, log) -> None:
    server.terminate()
    server.wait(timeout=30)
    log.close()


async def _run(base: str, graph: str) -> dict:
    from langgraph_sdk import get_client

    client = get_client(url=base, timeout=httpx.Timeout(300.0))
    thread = await client.threads.create()
    return await client.runs.wait(thread["thread_id"], graph, input=CASE)


@pytest.mark.battery
def test_plugin_graphs_and_the_docs_context_example_run_under_langgraph_dev_outside_the_checkout(tmp_path):
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, str(MYLAB)], check=True, capture_output=True, timeout=300)
    outside = tmp_path / "outside"  # no checkout file reachable by a relative path
    outside.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "ATELIER_CACHE_DIR": str(tmp_path / "cache"),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
    }

    # a langgraph.json of the researcher's own, serving only the plugin's graph: no Atelier graph warms up
    (outside / "mine.py").write_text("from mylab.graphs import build\n\ngraph = build()\n")
    (outside / "langgraph.json").write_text(json.dumps({"dependencies": ["."], "graphs": {"mine": "./mine.py:graph"}}))
    server, base, log = _serve(outside / "langgraph.json", outside, env)
    try:
        out = asyncio.run(_run(base, "mine"))
        assert out["response"]["meta"]["pipeline"] == "draft_revise"
    finally:
        _stop(server, log)
    assert "Blocking call" not in (outside / f"server-{base.rsplit(':', 1)[1]}.log").read_text()

    # what `atelier studio` writes: Atelier's graphs, the installed plugin pipeline by entry point, one by --graph
    written = subprocess.run(
        [
            sys.executable,
            "-m",
            "atelier.runs.cli",
            "studio",
            str(outside / "studio"),
            "--graph",
            "mine=mylab.graphs:build",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert written.returncode == 0, written.stderr
    assert "needs the internet" in written.stderr
    served = json.loads((outside / "studio" / "langgraph.json").read_text())["graphs"]
    assert {*SHIPPED, "draft_revise", "mine"} == set(served)
    server, base, log = _serve(outside / "studio" / "langgraph.json", outside, env)
    try:
        for graph in ("draft_revise", "mine"):
            out = asyncio.run(_run(base, graph))
            assert out["response"]["meta"]["pipeline"] == "draft_revise", graph
        example = subprocess.run(
            [sys.executable, str(ROOT / "docs" / "examples" / "studio_context.py"), base],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert example.returncode == 0, example.stderr
        lines = example.stdout.splitlines()
        assert lines[0].startswith("asked: ") and lines[1] == "clarify: answered" and lines[2].startswith("report: ")
    finally:
        _stop(server, log)
