"""A rerun of the same recipe writes the same reports, byte for byte, and asks its judges nothing new:
nothing ephemeral of a run (the sandbox web's loopback port, a temporary folder, the time) reaches
a prompt or a report. Two runs of one recipe with the scripted model, each in a new folder with
its own recorded web (so each starts its own sandbox web, on another port, and reads every page
live): a cited page the web cannot serve is said the same way in both reports, and every judge call
of the second run is answered from the response cache (its prompts are the first run's)."""

from __future__ import annotations

import json

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.tools.sandbox.server import SandboxWeb
from tests.research_api_stub import ResearchApiStub

CITES = [
    ("https://wayfarer-notes.example/lisbon/where-to-stay", "Where to stay in Lisbon"),
    ("https://wayfarer-notes.example/no-such-page", "A page the web does not have"),
]


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recipe(stub: ResearchApiStub, web_dir):
    return parse_recipe(
        {
            "name": "rerun",
            "benchmark": {"name": "sample", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": "api",
                    "pipeline": "research_api",
                    "memory": {"backend": "full"},
                    "models": {
                        "researcher": {
                            "model": "perplexity/sonar-deep-research",
                            "api_base": stub.base_url,
                            "api_key": "sk-stub",
                            "max_retries": 0,
                        }
                    },
                },
                {"name": "rag", "pipeline": "rag", "memory": {"backend": "full"}},
            ],
            "judges": [{"name": "pqr"}],
            "web": {"cache_dir": str(web_dir)},  # a new recorded web: every page read live again
        }
    )


def test_a_rerun_writes_the_same_reports_and_hits_the_cache_on_every_judge_call(tmp_path, cache_dir, monkeypatch):
    served: list[str] = []
    start = SandboxWeb.start

    def noting_start(self):
        started = start(self)
        served.append(self.base_url)
        return started

    monkeypatch.setattr(SandboxWeb, "start", noting_start)
    with ResearchApiStub("perplexity", CITES) as stub:
        first = run_recipe(recipe(stub, tmp_path / "web-1"), tmp_path / "first", progress=False)
        second = run_recipe(recipe(stub, tmp_path / "web-2"), tmp_path / "second", progress=False)
    assert len(set(served)) == 2  # each run served its sandbox web on a port of its own

    texts = [{r["key"]: r["response"]["text"] for r in lines(run.results)} for run in (first, second)]
    assert len(texts[0]) == 2 and texts[0] == texts[1]
    unread = [t for t in texts[0].values() if "no-such-page (not read" in t]
    assert unread and all("127.0.0.1" not in t and "sandbox.invalid" not in t for t in texts[0].values())
    for run in (first, second):  # neither the results nor the judges' details name the port
        assert not any(url.split("//")[1] in run.results.read_text() for url in served)

    judged = [e for e in lines(second.ledger) if e["role"].startswith("pqr")]
    assert judged and all(e["cache_hit"] for e in judged)
    assert all(e["cache_hit"] for e in lines(second.ledger))  # the systems' calls too
