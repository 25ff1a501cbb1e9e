"""Judges in real runs: every judge on the benchmarks that fit it (scripted model), misfits refused
before any episode, PQR's R reading cited pages through the sandbox web and its replay, and a judge
over litellm's real HTTP path (the OpenAI-compatible stub)."""

from __future__ import annotations

import asyncio
import json

import pytest

from atelier.agents.judges.base import JudgeEnv, create_judge
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import JUDGE_ROLES, ModelSettings
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.loaders.sample import sample_pages
from atelier.benchmarks.registry import load_cases
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultsFile
from atelier.tools.config import WebConfig
from atelier.tools.web import build_web
from tests.judge_doubles import HashedCitation, serving, sha256
from tests.openai_stub import OpenAIStub

RANGES = {"0-1": (0, 1), "0-10": (0, 10), "0-100": (0, 100)}


def recipe(tmp_path, benchmark: dict, judges: list[dict], systems=("none",)):
    return parse_recipe(
        {
            "name": "judges",
            "benchmark": benchmark,
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [{"name": s, "memory": {"backend": s}} for s in systems],
            "judges": judges,
            "run": {"out_dir": str(tmp_path / "out"), "concurrency": 4},
        }
    )


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_scored_within_range(folder, judges: list[str]) -> list[dict]:
    # the latest line per key (a pairwise judgment is appended to its episode's line after the episodes)
    results = [r.model_dump(mode="json") for r in ResultsFile(folder.results).load().values()]
    assert results and all(r["status"] == "ok" for r in results)
    for r in results:
        for j in r["judgments"]:
            low, high = RANGES[j["scale"]]
            assert j["error"] is None, j["error"]
            assert low <= j["score"] <= high, (j["judge"], j["score"])
            assert r["scores"][j["judge"]] == j["score"]
    assert {j["judge"] for r in results for j in r["judgments"]} == set(judges)
    return results


def test_every_judge_scores_the_sample_suite_within_its_range(tmp_path, cache_dir) -> None:
    judges = [
        {"name": "pqr"},
        {"name": "bespoke"},
        {"name": "lampqa_aspects"},
        {"name": "lampqa_direct"},
        {"name": "lampqa_pairwise", "baseline": "none"},
        {"name": "aepd", "repeats": 2},
    ]
    folder = run_recipe(
        recipe(tmp_path, {"name": "sample", "limit": 3}, judges, systems=("none", "full")), progress=False
    )
    results = assert_scored_within_range(folder, [j["name"] for j in judges])
    # the pairwise judge compares each system with the baseline, after both episodes
    assert all(any(j["judge"] == "lampqa_pairwise" for j in r["judgments"]) == (r["system"] == "full") for r in results)
    assert all(j["repeats"] == 2 for r in results for j in r["judgments"] if j["judge"] == "aepd")
    # criteria were stored in the run folder: one P set per (task, persona), one Q set per task
    artifacts = folder.path / "judge_artifacts"
    assert len(list((artifacts / "pqr_criteria_P").glob("*.json"))) == 3
    summary = json.loads(folder.summary.read_text())
    pairwise = summary["systems"]["full"]["judges"]["lampqa_pairwise"]
    assert pairwise["n"] == 3 and summary["systems"]["none"]["judges"]["lampqa_pairwise"] == {
        **summary["systems"]["none"]["judges"]["lampqa_pairwise"],
        "n": 0,
        "failed": 0,
    }
    assert (
        pairwise["pairwise"]["n"] == 3
        and pairwise["pairwise"]["flip_rate"] == pairwise["flags"].get("order_flip", 0) / 3
    )
    assert pairwise["pairwise"]["win_rate"] == pytest.approx(pairwise["mean"])
    table = summary["systems"]["none"]["judges"]["bespoke"]["table"]
    assert set(table) == {"need_alignment", "content_depth", "tone", "explanation_style", "recall", "average"}
    assert table["average"] == pytest.approx(summary["systems"]["none"]["judges"]["bespoke"]["mean"])
    pqr = summary["systems"]["full"]["judges"]["pqr"]
    assert pqr["reliability"]["reports"] == 3 and set(pqr["criteria"]) >= {"P", "GOAL", "Q", "DEIN", "R", "FA", "CC"}
    scores = [r["scores"]["pqr"] for r in results if r["system"] == "full"]
    assert pqr["criteria"]["overall"] == pytest.approx(sum(scores) / 3) == pytest.approx(pqr["mean"])
    roles = {e["role"] for e in lines(folder.ledger)}
    assert roles - {"system"} <= set(JUDGE_ROLES) and "judge" not in roles


@pytest.mark.parametrize(
    ("benchmark", "judges"),
    [
        ({"name": "pdr", "setting": "persona", "limit": 2}, [{"name": "pqr"}]),
        ({"name": "ikat", "limit": 2}, [{"name": "aepd"}]),
        ({"name": "drb", "limit": 2}, [{"name": "pqr", "axes": ["Q", "R"]}]),
        ({"name": "locomo", "limit": 2}, [{"name": "locomo"}]),
        ({"name": "prefeval", "limit": 2}, [{"name": "prefeval"}]),
    ],
)
def test_benchmarks_are_scored_by_the_judges_that_fit_them(tmp_path, cache_dir, benchmark, judges) -> None:
    folder = run_recipe(recipe(tmp_path, benchmark, judges), progress=False)
    results = assert_scored_within_range(folder, [j["name"] for j in judges])
    if benchmark["name"] == "drb":  # Q on DeepResearch Bench's own criteria
        assert all(j["details"]["Q"]["criteria_source"] == "shipped" for r in results for j in r["judgments"])
    figures = json.loads(folder.summary.read_text())["systems"]["none"]["judges"][judges[0]["name"]]
    if benchmark["name"] == "locomo":  # LoCoMo's per-category table
        assert sum(c["n"] for c in figures["per_category"].values()) == 2
    if benchmark["name"] == "prefeval":  # accuracy with PrefEval's error types
        assert figures["prefeval"]["n"] == 2 and figures["prefeval"]["accuracy"] == pytest.approx(figures["mean"])


@pytest.mark.parametrize(
    ("benchmark", "judge", "lacking"),
    [
        ({"name": "drb", "limit": 2}, {"name": "pqr"}, "a structured persona"),
        ({"name": "pdr", "setting": "persona", "limit": 2}, {"name": "bespoke"}, "response-judgment pairs"),
        ({"name": "sample", "limit": 2}, {"name": "locomo"}, "a reference answer"),
        ({"name": "locomo", "limit": 2}, {"name": "lampqa_aspects"}, "rubric aspects"),
    ],
)
def test_a_judge_the_benchmark_cannot_feed_is_refused_before_the_run(
    tmp_path, cache_dir, benchmark, judge, lacking
) -> None:
    with pytest.raises(ConfigError) as caught:
        run_recipe(recipe(tmp_path, benchmark, [judge]), progress=False)
    message = str(caught.value)
    assert f"judge {judge['name']!r} does not fit benchmark {benchmark['name']!r}" in message and lacking in message
    assert not (tmp_path / "out").exists()  # no folder, no episode


def test_pairwise_baseline_must_be_a_system_of_the_recipe(tmp_path, cache_dir) -> None:
    with pytest.raises(ConfigError, match="baseline system 'nobody' is not in the recipe"):
        run_recipe(
            recipe(tmp_path, {"name": "sample", "limit": 1}, [{"name": "lampqa_pairwise", "baseline": "nobody"}]),
            progress=False,
        )


class CitingGateway(Gateway):
    """The scripted model, except that the claims it extracts cite the report's first reference."""

    async def structured(self, role, messages, schema):
        if schema.__name__ == "ExtractedClaims":
            return schema.model_validate(
                {
                    "claims": [
                        {"fact": "A fact from the page.", "ref_idx": "1", "url": ""},
                        {"fact": "An uncited fact.", "ref_idx": "", "url": ""},
                    ]
                }
            )
        return await super().structured(role, messages, schema)


def test_pqr_reads_cited_pages_through_the_sandbox_web_and_its_replay(tmp_path, cache_dir) -> None:
    page = sample_pages()[0]
    case = load_cases("sample", limit=1)[0]
    judge = create_judge({"name": "pqr", "axes": ["R"]})

    async def judged(mode: str):
        async with build_web(WebConfig(mode=mode, cache_dir=tmp_path / "web")) as web:
            read = await web.fetch(page.url)  # what the system read, as a pipeline would cite it
            response = SystemResponse(
                text=f"{page.title}: a fact [1].",
                citations=[HashedCitation(source_id=page.id, url=page.url, title=page.title, sha256=sha256(read.text))],
            )
            result = await judge.judge(case, response, JudgeEnv(gateway=CitingGateway(), web=serving(web)))
            return result, [entry.from_cache for entry in web.log]

    recorded, recorded_log = asyncio.run(judged("record"))
    replayed, replayed_log = asyncio.run(judged("replay"))  # no sandbox, no network: the recorded page
    assert recorded_log == [False, True] and replayed_log == [True, True]  # the judge read what the system read
    for result in (recorded, replayed):
        r = result.details["R"]
        assert result.error is None and (r["n_total"], r["n_cited"]) == (2, 1)
        (source,) = r["sources"]
        assert source["source"] == "[1]" and source["url"] == page.url and source["read"]
        assert source["text_matches_citation"] is True and source["chars"] > 100
        assert r["claims"][0]["verdict"] in ("supported", "unsupported", "unknown") and r["source_text_mismatches"] == 0
        assert result.score == pytest.approx((r["factual_accuracy"] + 5.0) / 2)
    assert recorded.details["R"]["claims"] == replayed.details["R"]["claims"]


def test_judges_over_litellms_http_path(cache_dir) -> None:
    case = load_cases("sample", limit=1)[0]
    with OpenAIStub() as stub:
        settings = ModelSettings(model="openai/gpt-4o-mini", api_base=stub.base_url, api_key="sk-stub", max_retries=0)
        gateway = Gateway({"judge": settings})
        env = JudgeEnv(gateway=gateway)
        results = [
            asyncio.run(create_judge({"name": name}).judge(case, SystemResponse(text="An answer."), env))
            for name in ("pqr", "bespoke", "lampqa_aspects")
        ]
        requests = len(stub.requests)
    assert all(r.error is None and r.score is not None for r in results)
    assert requests == len(gateway.ledger.entries) and all(e.prompt_tokens > 0 for e in gateway.ledger.entries)
