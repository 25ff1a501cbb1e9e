"""`atelier gateway serve` end to end: a real process serving the gateway to any OpenAI client,
with the sandbox web's SearXNG search beside it, writing its ledger."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import openai


def test_gateway_serve_answers_openai_clients_and_writes_a_ledger(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "runs.cli", "gateway", "serve", "--model", "scripted", "--port", "0",
               "--ledger", str(ledger), "--no-cache", "--web", "--role", "final_report=writer"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=Path(__file__).resolve().parent.parent)
    try:
        first = process.stdout.readline()
        base = re.search(r"(http://127\.0\.0\.1:\d+/v1)", first).group(1)
        search = re.search(r"(http://\S+/search)", process.stdout.readline()).group(1)
        client = openai.OpenAI(base_url=base, api_key="anything", max_retries=0)
        answer = client.chat.completions.create(model="final_report", messages=[{"role": "user", "content": "Hello there, write."}])
        found = httpx.get(search, params={"q": "laptop", "format": "json"}, timeout=30).json()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert answer.choices[0].message.content.startswith("DRY RUN")
    assert found["results"] and all(r["citable_url"] for r in found["results"])
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["node"], e["role"], e["system"], e["run_id"]) for e in entries] == [
        ("gateway:final_report", "writer", "gateway", "gateway")]
