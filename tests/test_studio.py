"""LangGraph Studio serves the graphs in langgraph.json: `langgraph dev` starts offline and runs an
episode end to end on the embedded defaults."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def test_langgraph_json_names_importable_compiled_graphs():
    import importlib

    config = json.loads((ROOT / "langgraph.json").read_text())
    for name, target in config["graphs"].items():
        path, attr = target.split(":")
        module = importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", "."))
        graph = getattr(module, attr)
        assert hasattr(graph, "ainvoke") and graph.get_graph().nodes, name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_langgraph_dev_runs_an_episode(tmp_path):
    port = _free_port()
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "langgraph"), "dev", "--port", str(port), "--no-browser", "--no-reload",
         "--allow-blocking"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        graphs = {a["graph_id"] for a in httpx.post(f"{base}/assistants/search", json={}, timeout=30).json()}
        assert {"episode", "direct", "memory", "judge"} <= graphs
        out = httpx.post(
            f"{base}/runs/wait",
            json={"assistant_id": "episode", "input": {"benchmark": "sample", "case_id": "q01"}},
            timeout=120,
        ).json()
        assert "__error__" not in out, out
        assert out["user_context"]["backend"] == "full" and out["user_context"]["event_ids"]
        assert out["response"]["text"].startswith("DRY RUN")
        [judgment] = out["judgments"]
        assert judgment["judge"] == "lampqa_aspects" and 0 <= judgment["score"] <= 1
    finally:
        server.terminate()
        server.wait(timeout=30)
