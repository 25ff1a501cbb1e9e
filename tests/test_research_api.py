"""Deep-research model APIs as systems (`research_api`), against stub servers speaking each
provider's format (tests/research_api_stub.py): Perplexity's chat completions with `citations` and
`search_results`, and OpenAI's Responses API with `url_citation` annotations — each whole and
streamed. The provider's citations become the response's; every cited page is fetched through the
run's web, kept in `sources/` by its sha256 and read by PQR's R; an unfetchable one is a counted
degradation (exit 3); reasoning tokens, web searches and cost are in the ledger; a replay of the
recorded web gives the same."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import pytest

from atelier.agents.judges.base import JudgeEnv, create_judge
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import GroundedAnswer, Grounding, ProviderCitation, read_responses
from atelier.agents.models.settings import ModelSettings
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.graphs.pipelines import pipeline_options
from atelier.graphs.research_api import numbered_text
from atelier.graphs.sources import SourceStore
from atelier.runs.cli import main
from atelier.tools.config import WebConfig
from atelier.tools.web import build_web
from tests.judge_doubles import serving
from tests.research_api_stub import REASONING_TOKENS, SEARCHES, ResearchApiStub

READABLE = [
    ("https://wayfarer-notes.example/lisbon/where-to-stay", "Where to stay in Lisbon"),
    ("https://iberian-rail-guide.example/portugal/lisbon-to-porto", "Lisbon to Porto by train"),
]
UNFETCHABLE = ("https://wayfarer-notes.example/no-such-page", "A page the web does not have")
CITES = [*READABLE, UNFETCHABLE]
MODELS = {"perplexity": "perplexity/sonar-deep-research", "responses": "openai/o3-deep-research"}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_recipe(tmp_path: Path, name: str, stub: ResearchApiStub, stream: bool, web: dict) -> Path:
    options = {"api": "chat" if stub.kind == "perplexity" else "responses", "stream": stream}
    recipe = {
        "name": name,
        "benchmark": {"name": "sample", "setting": "context", "limit": 1},
        "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
        "systems": [
            {
                "name": stub.kind,
                "pipeline": "research_api",
                "pipeline_options": options,
                "memory": {"backend": "full"},
                "models": {
                    "researcher": {
                        "model": MODELS[stub.kind],
                        "api_base": stub.base_url,
                        "api_key": "sk-stub-key",
                        "max_retries": 1,
                        "retry_backoff_s": 0,
                        **({"search_cost_per_call": 0.01} if stub.kind == "responses" else {}),
                    }
                },
            }
        ],
        "judges": [{"name": "pqr", "axes": ["R"]}],
        "web": web,
    }
    toml = tmp_path / f"{name}.toml"
    toml.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in recipe.items()))
    return toml


def _toml(value) -> str:
    """A value as TOML (inline tables and arrays)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def atelier(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["atelier", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    return exited.value.code or 0, capsys.readouterr().err


class CitingEveryNumber(Gateway):
    """A fact checker whose extraction cites each of the response's references once."""

    def __init__(self) -> None:
        super().__init__({"judge": ModelSettings(model="scripted")})

    async def structured(self, role, messages, schema):
        if schema.__name__ == "ExtractedClaims":
            allowed = schema.model_json_schema()["$defs"]["ExtractedClaim"]["properties"]["ref_idx"]["enum"]
            numbers = [n for n in allowed if n not in ("", "0")]
            return schema.model_validate({"claims": [{"fact": f"Fact {n}.", "ref_idx": n, "url": ""} for n in numbers]})
        return await super().structured(role, messages, schema)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["perplexity", "responses"])
def test_a_deep_research_api_is_a_system_whose_citations_are_fetched_stored_and_checked(
    tmp_path, cache_dir, capsys, monkeypatch, kind, stream
):
    with ResearchApiStub(kind, CITES) as stub:
        recipe = write_recipe(tmp_path, "record", stub, stream, {})
        code, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(tmp_path / "first"), "--no-progress")
        # the cited page the web does not have: counted, not dropped, and the run says so
        assert code == 3, err
        assert "fetch_failed 1" in err  # (R's own source_unreadable depends on which claims cite it: below)
        folder = tmp_path / "first"
        (result,) = lines(folder / "results.jsonl")
        assert result["status"] == "ok" and result["scores"]["pqr"] is not None
        response = result["response"]
        # the provider's citations are the response's, numbered as the text cites them
        assert [c["url"] for c in response["citations"]] == [url for url, _ in CITES]
        assert [c["number"] for c in response["citations"]] == [1, 2, 3]
        assert all(f"[{n}]" in response["text"] for n in (1, 2, 3))
        store = SourceStore.for_run(str(folder))
        for citation in response["citations"][:2]:  # each read page is in sources/ under its sha256
            text = store.get(citation["sha256"])
            assert hashlib.sha256(text.encode()).hexdigest() == citation["sha256"]
            assert (folder / "sources" / citation["sha256"][:2] / f"{citation['sha256']}.txt").exists()
        assert response["citations"][2]["sha256"] is None
        (failed,) = [d for d in response["degraded"] if d["kind"] == "fetch_failed"]
        assert UNFETCHABLE[0] in failed["detail"]
        assert response["meta"]["citations"] == {"cited": 3, "read": 2, "unread": [UNFETCHABLE[0]]}
        fetched = [e["request"]["url"] for e in lines(folder / "web_log.jsonl") if e["kind"] == "fetch"]
        assert all(url in fetched for url, _ in CITES)
        # the provider's call in the ledger: tokens, reasoning tokens, web searches and cost
        (call,) = [e for e in lines(folder / "ledger.jsonl") if e["role"] == "researcher"]
        assert call["kind"] == "grounded" and call["model"] == MODELS[kind] and call["status"] == "ok"
        assert call["prompt_tokens"] > 0 and call["completion_tokens"] > 0
        assert call["reasoning_tokens"] == REASONING_TOKENS
        if kind == "perplexity":
            assert call["cost_usd"] == pytest.approx(0.016)  # Perplexity's own reported total
            # litellm 1.106.2 keeps Perplexity's search count in a whole answer, not in a stream
            assert call["search_calls"] == (None if stream else SEARCHES)
        else:
            tokens = (
                call["prompt_tokens"] * 1e-05 + call["completion_tokens"] * 4e-05
            )  # litellm's o3-deep-research price
            assert call["search_calls"] == SEARCHES
            assert call["cost_usd"] == pytest.approx(tokens + SEARCHES * 0.01)
        sent = stub.requests[-1]["body"]
        assert bool(sent.get("stream")) is stream
        if kind == "responses":
            assert sent["tools"] == [{"type": "web_search_preview"}] and sent["instructions"]
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["ledger"]["reasoning_tokens"] == REASONING_TOKENS

        # the recorded web replayed (and the provider's answer from the response cache): the same
        replay = write_recipe(tmp_path, "replay", stub, stream, {"mode": "replay", "cache_dir": str(folder / "web")})
        asked = len(stub.requests)
        code, err = atelier(capsys, monkeypatch, "run", str(replay), "--out", str(tmp_path / "second"), "--no-progress")
        assert code == 3, err
        assert len(stub.requests) == asked  # no second provider call
        (again,) = lines(tmp_path / "second" / "results.jsonl")
        assert again["response"]["citations"] == response["citations"]
        assert again["response"]["text"] == response["text"]

    # PQR's R reads each cited page through the replayed web: exactly the text the system stored
    case = load_cases("sample", setting="context", limit=1)[0]
    judge = create_judge({"name": "pqr", "axes": ["R"]})

    async def judged():
        config = WebConfig(mode="replay", cache_dir=folder / "web")
        async with build_web(config) as web:
            env = JudgeEnv(gateway=CitingEveryNumber(), web=serving(web), sources=store.get)
            return await judge.judge(case, SystemResponse.model_validate(response), env)

    r = asyncio.run(judged()).details["R"]
    by_source = {s["source"]: s for s in r["sources"]}
    assert by_source["[1]"]["read"] and by_source["[1]"]["text_matches_citation"] is True
    assert by_source["[2]"]["read"] and by_source["[2]"]["text_matches_citation"] is True
    assert not by_source["[3]"]["read"] and r["unreadable_sources"] == 1


def test_an_answer_citing_nothing_is_no_findings(tmp_path, cache_dir):
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    recipe = parse_recipe(
        {
            "name": "scripted-research",
            "benchmark": {"name": "sample", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [{"name": "api", "pipeline": "research_api", "memory": {"backend": "none"}}],
            "judges": [{"name": "lampqa_aspects"}],
        }
    )
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    (result,) = lines(folder.results)
    assert result["status"] == "ok" and result["response"]["citations"] == []
    assert [d["kind"] for d in result["response"]["degraded"]] == ["no_findings"]
    (call,) = [e for e in lines(folder.ledger) if e["role"] == "researcher"]
    assert call["kind"] == "grounded" and call["dry_run"]


def test_responses_citations_are_numbered_by_first_use_and_marked_after_their_spans():
    text = "A is true (see a). B too (see b). A again (see a)."
    spans = [(text.index("see a"), text.index("see a") + 5)]
    answer = read_responses(
        {
            "status": "completed",
            "output": [
                {"type": "web_search_call"},
                {
                    "type": "message",
                    "content": [
                        {
                            "type": "output_text",
                            "text": text,
                            "annotations": [
                                {
                                    "type": "url_citation",
                                    "url": "https://a.example/",
                                    "title": "A",
                                    "start_index": s,
                                    "end_index": e,
                                }
                                for s, e in [
                                    *spans,
                                    (text.index("see b"), text.index("see b") + 5),
                                    (text.rindex("see a"), text.rindex("see a") + 5),
                                ]
                            ],
                        }
                    ],
                },
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 2}},
        },
        "openai/o3-deep-research",
    ).answer
    # (the second annotation names a.example too in this hand-made answer, so one URL, three spans)
    assert [c.number for c in answer.citations] == [1] and len(answer.citations[0].spans) == 3
    assert numbered_text(answer) == "A is true (see a [1]). B too (see b [1]). A again (see a [1])."
    assert answer.usage.search_calls == 1 and answer.usage.reasoning_tokens == 2
    two = GroundedAnswer(
        text="x y",
        citations=[
            ProviderCitation(url="https://a.example/", number=1, spans=[(1, 1)]),
            ProviderCitation(url="https://b.example/", number=2, spans=[(3, 3)]),
        ],
    )
    assert numbered_text(two) == "x [1] y [2]"


def test_research_api_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="tools are the Responses API's"):
        pipeline_options("research_api", {"tools": [{"type": "web_search_preview"}]})
    with pytest.raises(ConfigError, match="pipeline_options.api"):
        pipeline_options("research_api", {"api": "completions"})
    assert pipeline_options("research_api", {"api": "responses"}).grounding() == Grounding(
        api="responses", tools=({"type": "web_search_preview"},)
    )


async def test_the_responses_api_is_openais_only(cache_dir):
    gateway = Gateway({"researcher": ModelSettings(model="anthropic/claude-x", api_key="k", max_retries=0)})
    with pytest.raises(ModelCallError, match="the Responses API is OpenAI's"):
        await gateway.grounded("researcher", [{"role": "user", "content": "q"}], Grounding(api="responses"))
