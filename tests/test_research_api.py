"""Deep-research model APIs as systems (`research_api`), against stub servers speaking each
provider's format as its public reference gives it (tests/research_api_stub.py): Perplexity's chat
completions with `citations` and `search_results`, or `search_results` alone (the API's newer
form), and OpenAI's Responses API with `url_citation` annotations and `web_search_call` actions —
each whole and streamed, the Responses API also in the background (polled to its end). The
provider's citations become the response's; a marker or span that points nowhere is removed and
counted; every cited page is fetched through the run's web, kept in `sources/` by its sha256 and
read by PQR's R; an unfetchable one is a counted degradation (exit 3); reasoning tokens, billed web
searches and cost (each counted once) are in the ledger; a replay of the recorded web gives the same."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from tests.research_api_stub import PERPLEXITY_BILL, REASONING_TOKENS, SEARCHES, ResearchApiStub

READABLE = [
    ("https://wayfarer-notes.example/lisbon/where-to-stay", "Where to stay in Lisbon"),
    ("https://iberian-rail-guide.example/portugal/lisbon-to-porto", "Lisbon to Porto by train"),
]
UNFETCHABLE = ("https://wayfarer-notes.example/no-such-page", "A page the web does not have")
CITES = [*READABLE, UNFETCHABLE]
MODELS = {
    "perplexity": "perplexity/sonar-deep-research",
    "responses": "openai/o3-deep-research",
    "interactions": "gemini/deep-research-pro-preview-12-2025",
}
APIS = {"perplexity": "chat", "responses": "responses", "interactions": "interactions"}
# the role's own prices for Gemini Deep Research, which litellm has none for
GEMINI_PRICES = {"input_cost_per_token": 2e-06, "output_cost_per_token": 1.2e-05, "search_cost_per_call": 0.014}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_recipe(tmp_path: Path, name: str, stub: ResearchApiStub, mode: str, web: dict) -> Path:
    options: dict = {"api": APIS[stub.kind], "stream": mode == "streamed"}
    if mode == "background":
        options |= {"background": stub.kind == "responses", "poll_s": 0.01}
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
                        **(GEMINI_PRICES if stub.kind == "interactions" else {}),
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


FORMS = [
    ("perplexity", "citations", "whole"),
    ("perplexity", "citations", "streamed"),
    ("perplexity", "search_results", "whole"),
    ("perplexity", "search_results", "streamed"),
    ("responses", "", "whole"),
    ("responses", "", "streamed"),
    ("responses", "", "background"),
    ("interactions", "", "background"),  # Gemini Deep Research: always in the background
]


@pytest.mark.parametrize(("kind", "form", "mode"), FORMS, ids=["-".join(filter(None, f)) for f in FORMS])
def test_a_deep_research_api_is_a_system_whose_citations_are_fetched_stored_and_checked(
    tmp_path, cache_dir, capsys, monkeypatch, kind, form, mode
):
    with ResearchApiStub(kind, CITES, form=form or "citations") as stub:
        recipe = write_recipe(tmp_path, "record", stub, mode, {})
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
        assert [d["kind"] for d in response["degraded"]] == ["fetch_failed"]
        assert UNFETCHABLE[0] in response["degraded"][0]["detail"]
        assert response["meta"]["citations"] == {"cited": 3, "read": 2, "unread": [UNFETCHABLE[0]]}
        fetched = [e["request"]["url"] for e in lines(folder / "web_log.jsonl") if e["kind"] == "fetch"]
        assert all(url in fetched for url, _ in CITES)
        # the provider's call in the ledger: tokens, reasoning tokens, web searches and cost
        (call,) = [e for e in lines(folder / "ledger.jsonl") if e["role"] == "researcher"]
        assert call["kind"] == "grounded" and call["model"] == MODELS[kind] and call["status"] == "ok"
        assert call["prompt_tokens"] > 0 and call["completion_tokens"] > 0
        assert call["reasoning_tokens"] == REASONING_TOKENS
        assert call["search_calls"] == (2 * SEARCHES if kind == "interactions" else SEARCHES)
        if kind == "perplexity":
            # Perplexity's own bill, whole or streamed; its citation tokens kept in a stream too
            assert call["cost_usd"] == pytest.approx(PERPLEXITY_BILL["total_cost"])
            assert call["citation_tokens"] == 100 * len(CITES)
        elif kind == "responses":
            tokens = (
                call["prompt_tokens"] * 1e-05 + call["completion_tokens"] * 4e-05
            )  # litellm's o3-deep-research price
            assert call["cost_usd"] == pytest.approx(tokens + SEARCHES * 0.01)
        else:  # two queries per search step; thought tokens billed as output
            assert call["search_calls"] == 2 * SEARCHES
            tokens = call["prompt_tokens"] * 2e-06 + call["completion_tokens"] * 1.2e-05
            assert call["cost_usd"] == pytest.approx(tokens + 2 * SEARCHES * 0.014)
        sent = [r for r in stub.requests if r["method"] == "POST"][-1]["body"]
        assert bool(sent.get("stream")) is (mode == "streamed")
        if kind == "responses":
            assert sent["tools"] == [{"type": "web_search_preview"}] and sent["instructions"]
        if kind != "perplexity":
            assert bool(sent.get("background")) is (mode == "background")
            polls = [r for r in stub.requests if r["method"] == "GET"]
            assert len(polls) == (stub.polls + 1 if mode == "background" else 0)  # polled until it ended
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["ledger"]["reasoning_tokens"] == REASONING_TOKENS

        # the recorded web replayed (and the provider's answer from the response cache): the same
        replay = write_recipe(tmp_path, "replay", stub, mode, {"mode": "replay", "cache_dir": str(folder / "web")})
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
                {"type": "web_search_call", "action": {"type": "search", "query": "a"}},
                {"type": "web_search_call", "action": {"type": "open_page", "url": "https://a.example/"}},
                {
                    "type": "web_search_call",
                    "action": {"type": "find_in_page", "url": "https://a.example/", "pattern": "A"},
                },
                {
                    "type": "message",
                    "content": [
                        {
                            "type": "output_text",
                            "text": text,
                            "annotations": [
                                {
                                    "type": "url_citation",
                                    "url": url,
                                    "title": "A",
                                    "start_index": s,
                                    "end_index": e,
                                }
                                for (s, e), url in zip(
                                    [
                                        *spans,
                                        (text.index("see b"), text.index("see b") + 5),
                                        (text.rindex("see a"), text.rindex("see a") + 5),
                                    ],
                                    [
                                        "https://a.example/",
                                        "https://a.example/",
                                        "https://a.example/?utm_source=openai",
                                    ],
                                    strict=True,
                                )
                            ],
                        }
                    ],
                },
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 2}},
        },
        "openai/o3-deep-research",
    ).answer
    # (the annotations name a.example, the last with OpenAI's tracking tag: one URL, three spans)
    assert [c.number for c in answer.citations] == [1] and len(answer.citations[0].spans) == 3
    assert numbered_text(answer).text == "A is true (see a [1]). B too (see b [1]). A again (see a [1])."
    # only the search is billed; opening a page and finding in it are not
    assert answer.usage.search_calls == 1 and answer.usage.page_actions == 2 and answer.usage.reasoning_tokens == 2
    two = GroundedAnswer(
        text="x y",
        citations=[
            ProviderCitation(url="https://a.example/", number=1, spans=[(1, 1)]),
            ProviderCitation(url="https://b.example/", number=2, spans=[(3, 3)]),
        ],
    )
    assert numbered_text(two).text == "x [1] y [2]"


def test_a_span_that_points_nowhere_is_counted_and_a_marker_never_splits_a_word():
    text = "Sleeping trains cross Europe."
    answer = GroundedAnswer(
        text=text,
        citations=[
            # reversed (end before start), negative, past the end: none is placed, each is counted
            ProviderCitation(url="https://a.example/", number=1, spans=[(9, 1), (-3, 4), (5, 99)]),
            ProviderCitation(url="https://b.example/", number=2, spans=[(0, 3)]),  # ends inside "Sleeping"
        ],
    )
    numbered = numbered_text(answer)
    assert numbered.text == "Sleeping [2] trains cross Europe."
    assert numbered.bad_spans == [(9, 1), (-3, 4), (5, 99)]
    (removed,) = numbered.degradations()
    assert removed.kind == "citation_removed" and removed.count == 3


def test_perplexity_markers_naming_no_citation_are_removed_and_counted():
    answer = GroundedAnswer(
        text="Trains are slow[1]. Night trains sleep[7][2]. Ferries too [12].",
        citations=[ProviderCitation(url=f"https://{n}.example/", number=n) for n in (1, 2, 3)],
    )
    numbered = numbered_text(answer)
    assert numbered.text == "Trains are slow[1]. Night trains sleep[2]. Ferries too."
    assert numbered.dangling == [7, 12]
    (removed,) = numbered.degradations()
    assert removed.kind == "citation_removed" and removed.count == 2 and "[7], [12]" in removed.detail


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcXYZ09 .,", min_size=1, max_size=8), min_size=1, max_size=12),
    spans=st.lists(st.tuples(st.integers(-5, 90), st.integers(-5, 90), st.integers(1, 4)), max_size=8),
)
def test_every_span_is_marked_at_a_word_boundary_or_counted(words, spans):
    text = " ".join(words)
    by_number: dict[int, list[tuple[int, int]]] = {}
    for start, end, number in spans:
        by_number.setdefault(number, []).append((start, end))
    answer = GroundedAnswer(
        text=text,
        citations=[ProviderCitation(url=f"https://{n}.example/", number=n, spans=s) for n, s in by_number.items()],
    )
    numbered = numbered_text(answer)
    valid = [(s, e) for s, e, _ in spans if 0 <= s <= e <= len(text)]
    assert len(numbered.bad_spans) == len(spans) - len(valid)  # every span placed or counted
    marker = r" \[\d\]"
    import re

    assert re.sub(marker, "", numbered.text) == text  # the text is the provider's, markers aside
    assert len(re.findall(marker, numbered.text)) == len(valid)
    for found in re.finditer(marker, numbered.text):  # never inside a word
        before, after = numbered.text[: found.start()], numbered.text[found.end() :]
        assert not (before[-1:].isalnum() and after[:1].isalnum())


def _priced(kind: str, model: str, *, stream: bool = False, grounding: Grounding | None = None, **stub_args):
    """The ledger line of one grounded call of `model` against a stub of `kind` (a fresh cache)."""

    async def call(stub: ResearchApiStub, settings: ModelSettings):
        gateway = Gateway({"researcher": settings}, cache=None)
        asked = grounding or Grounding(api="chat" if kind == "perplexity" else "responses", stream=stream)
        await gateway.grounded("researcher", [{"role": "user", "content": "Trains?"}], asked)
        (entry,) = gateway.ledger.entries
        return entry

    def run(**settings_args):
        with ResearchApiStub(kind, READABLE, **stub_args) as stub:
            settings = ModelSettings(model=model, api_base=stub.base_url, api_key="k", max_retries=0, **settings_args)
            return asyncio.run(call(stub, settings))

    return run


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_perplexitys_own_bill_is_the_cost_and_its_search_price_is_never_added(cache_dir, stream):
    priced = _priced("perplexity", "perplexity/sonar-deep-research", stream=stream)
    assert priced().cost_usd == pytest.approx(0.016)
    # a role's price per search does not add to a bill that has its searches in it already
    assert priced(search_cost_per_call=0.5).cost_usd == pytest.approx(0.016)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_perplexity_without_its_bill_is_priced_per_token_citation_token_reasoning_token_and_search(cache_dir, stream):
    entry = _priced("perplexity", "perplexity/sonar-deep-research", stream=stream, billed=False)()
    # litellm's sonar-deep-research prices: input and citation tokens $2/M, output $8/M, reasoning $3/M, $5/1k searches
    expected = (
        entry.prompt_tokens * 2e-6
        + 200 * 2e-6  # two citations of 100 citation tokens each
        + (entry.completion_tokens - REASONING_TOKENS) * 8e-6
        + REASONING_TOKENS * 3e-6
        + SEARCHES * 0.005
    )
    assert entry.citation_tokens == 200 and entry.search_calls == SEARCHES
    assert entry.cost_usd == pytest.approx(expected)
    # the role's price per search replaces litellm's, never adds to it
    again = _priced("perplexity", "perplexity/sonar-deep-research", stream=stream, billed=False)(
        search_cost_per_call=0.1
    )
    assert again.cost_usd == pytest.approx(expected - SEARCHES * 0.005 + SEARCHES * 0.1)


@pytest.mark.parametrize("mode", ["whole", "streamed", "background"])
def test_responses_searches_are_billed_once_and_page_actions_not_at_all(cache_dir, mode):
    grounding = Grounding(
        api="responses",
        tools=({"type": "web_search_preview"},),
        stream=mode == "streamed",
        background=mode == "background",
        poll_s=0.01,
    )
    actions = ("search", "open_page", "search", "find_in_page")  # two billed searches
    priced = _priced("responses", "openai/gpt-4.1", grounding=grounding, actions=actions)
    entry = priced()
    tokens = entry.prompt_tokens * 2e-6 + entry.completion_tokens * 8e-6  # litellm's gpt-4.1 prices
    assert entry.search_calls == 2
    assert entry.cost_usd == pytest.approx(tokens + 2 * 0.025)  # litellm's $25/1k searches, for searches only
    # the role's own price per search replaces litellm's (the shipped gpt41_search row once added both)
    assert priced(search_cost_per_call=0.01).cost_usd == pytest.approx(tokens + 2 * 0.01)
    # a model litellm has no search price for: unpriced unless the role gives one
    o3 = _priced("responses", "openai/o3-deep-research", grounding=grounding, actions=actions)
    assert o3().cost_usd is None
    assert o3(search_cost_per_call=0.01).cost_usd == pytest.approx(
        entry.prompt_tokens * 1e-05 + entry.completion_tokens * 4e-05 + 2 * 0.01
    )


def test_gemini_spans_in_bytes_become_markers_after_their_claims():
    from atelier.agents.models.grounding import read_interaction

    text = "Café prices — naïve. Trains run at night."
    start, end = text.index("Trains"), len(text)
    as_bytes = lambda at: len(text[:at].encode("utf-8"))
    interaction = {
        "status": "completed",
        "steps": [
            {"type": "google_search_call", "arguments": {"queries": ["a", "b"]}},
            {"type": "model_output", "content": [{"type": "text", "text": "An earlier draft."}]},
            {
                "type": "model_output",
                "content": [
                    {
                        "type": "text",
                        "text": text,
                        "annotations": [
                            {
                                "type": "url_citation",
                                "url": "https://t.example/",
                                "start_index": as_bytes(start),
                                "end_index": as_bytes(end),
                            },
                            {
                                "type": "url_citation",
                                "url": "https://c.example/",
                                "start_index": 0,
                                "end_index": as_bytes(4),
                            },
                            {"type": "url_citation", "url": "https://x.example/", "start_index": 500, "end_index": 600},
                        ],
                    }
                ],
            },
        ],
        "usage": {"total_input_tokens": 10, "total_output_tokens": 5, "total_thought_tokens": 7},
    }
    reply = read_interaction(interaction, "gemini/deep-research-pro-preview-12-2025")
    numbered = numbered_text(reply.answer)  # the last output is the report; its byte spans as characters
    assert numbered.text == "Café [2] prices — naïve. Trains run at night. [1]"
    assert [c.url for c in reply.answer.citations] == ["https://t.example/", "https://c.example/", "https://x.example/"]
    assert len(numbered.bad_spans) == 1  # the span past the text's end: counted, no marker
    assert reply.answer.usage.search_calls == 2 and reply.completion_tokens == 12 and reply.prompt_tokens == 10


def test_a_background_response_is_polled_to_its_end_and_cancelled_when_the_wait_runs_out(cache_dir):
    grounding = Grounding(api="responses", background=True, poll_s=0.01)

    async def ask(stub: ResearchApiStub, timeout_s: float):
        settings = ModelSettings(
            model="openai/o3-deep-research", api_base=stub.base_url, api_key="k", max_retries=0, timeout_s=timeout_s
        )
        return await Gateway({"researcher": settings}, cache=None).grounded(
            "researcher", [{"role": "user", "content": "Trains?"}], grounding
        )

    with ResearchApiStub("responses", READABLE, polls=3) as stub:
        answer = asyncio.run(ask(stub, 30))
        assert [c.url for c in answer.citations] == [url for url, _ in READABLE]
        assert [r["method"] for r in stub.requests] == ["POST", "GET", "GET", "GET", "GET"]
    with ResearchApiStub("responses", READABLE, polls=10_000) as stub:  # never ends within the wait
        with pytest.raises(ModelCallError, match="researcher"):
            asyncio.run(ask(stub, 0.5))
        (created,) = stub.background
        assert stub.background[created]["status"] == "cancelled"  # not left running (and billing) on the server
        assert stub.requests[-1]["path"] == f"/v1/responses/{created}/cancel"


def test_a_background_stream_that_breaks_off_is_polled_to_its_end(cache_dir):
    grounding = Grounding(api="responses", stream=True, background=True, poll_s=0.01)
    with ResearchApiStub("responses", READABLE, polls=1, cut_background_stream=True) as stub:
        settings = ModelSettings(model="openai/o3-deep-research", api_base=stub.base_url, api_key="k", max_retries=0)
        answer = asyncio.run(
            Gateway({"researcher": settings}, cache=None).grounded(
                "researcher", [{"role": "user", "content": "Trains?"}], grounding
            )
        )
        assert [c.number for c in answer.citations] == [1, 2]
        assert [r["method"] for r in stub.requests] == ["POST", "GET", "GET"]


def test_dangling_markers_and_broken_spans_reach_the_response_as_degradations(tmp_path, cache_dir, capsys, monkeypatch):
    for kind, args in (
        ("perplexity", {"form": "search_results", "markers_beyond": (7, 12)}),
        ("responses", {"spans": "reversed"}),
    ):
        with ResearchApiStub(kind, READABLE, **args) as stub:
            recipe = write_recipe(tmp_path, f"{kind}-broken", stub, "whole", {})
            code, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(tmp_path / kind), "--no-progress")
            assert code == 3, err
            (result,) = lines(tmp_path / kind / "results.jsonl")
            response = result["response"]
            (removed,) = [d for d in response["degraded"] if d["kind"] == "citation_removed"]
            assert removed["count"] == (2 if kind == "perplexity" else 1)
            assert "[7]" not in response["text"] and "[12]" not in response["text"]
            assert [c["number"] for c in response["citations"]] == [1, 2]
            if kind == "responses":  # the reversed span's citation is listed, its marker nowhere wrong
                assert response["text"].count("[1]") == 1 and "[2]" in response["text"]


def test_research_api_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="tools are the Responses API's"):
        pipeline_options("research_api", {"tools": [{"type": "web_search_preview"}]})
    with pytest.raises(ConfigError, match="pipeline_options.api"):
        pipeline_options("research_api", {"api": "completions"})
    assert pipeline_options("research_api", {"api": "responses"}).grounding() == Grounding(
        api="responses", tools=({"type": "web_search_preview"},)
    )
    with pytest.raises(ConfigError, match="background is the Responses API's"):
        pipeline_options("research_api", {"background": True})


async def test_the_responses_api_is_openais_only(cache_dir):
    gateway = Gateway({"researcher": ModelSettings(model="anthropic/claude-x", api_key="k", max_retries=0)})
    with pytest.raises(ModelCallError, match="the Responses API is OpenAI's"):
        await gateway.grounded("researcher", [{"role": "user", "content": "q"}], Grounding(api="responses"))
