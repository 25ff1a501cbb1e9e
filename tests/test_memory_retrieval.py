"""The `retrieval` backend: ranking per method, conversation turns, isolation in the shared chromadb
store, persistence without re-embedding, LLM expansion and profile form on the scripted model."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.query_expansion import expansion_messages
from atelier.benchmarks.case import (
    ChatMessage,
    ChatSession,
    ConversationTurn,
    MemorySnippet,
    PTKBStatement,
    SearchQueryRecord,
    SearchSession,
)
from atelier.benchmarks.common.errors import DataError
from atelier.memory.base import MemoryEnv, MemoryQuery
from atelier.memory.budget import count_tokens
from atelier.memory.registry import create_backend
from atelier.memory.retrieval.dense import passages
from atelier.memory.retrieval.event_store import EventStore, user_key
from atelier.memory.retrieval.fusion import reciprocal_rank_fusion, turn_mixture, weighted_sum

METHODS = ("bm25", "dense", "hybrid")


def history(user: str) -> list:
    return [
        MemorySnippet(id=f"{user}:diet", text="I am vegetarian and allergic to peanuts.", timestamp="2025-01-02"),
        MemorySnippet(id=f"{user}:run", text="I am training for my first marathon in October.", timestamp="2025-02-01"),
        PTKBStatement(id=f"{user}:cats", text="I live in a small flat in Lisbon with two cats."),
        ChatSession(
            id=f"{user}:money",
            timestamp="2025-03-01",
            messages=[
                ChatMessage(role="user", content="Explain index funds and ETFs to me simply."),
                ChatMessage(role="assistant", content="An index fund tracks a market index at low cost."),
            ],
        ),
        SearchSession(
            id=f"{user}:guitar",
            timestamp="2025-03-04",
            queries=[
                SearchQueryRecord(query="beginner guitar chords lessons"),
            ],
        ),
        MemorySnippet(
            id=f"{user}:car", text="My old car keeps breaking down; I want an electric car.", timestamp="2025-03-09"
        ),
    ]


def make(method: str, store=None, gateway: Gateway | None = None, **params):
    env = MemoryEnv(gateway=gateway or Gateway({"system": ModelSettings(), "memory": ModelSettings()}), store_dir=store)
    return create_backend({"backend": "retrieval", "method": method, **params}, env)


@pytest.fixture
async def backends(request):
    made = []

    def factory(*args, **kwargs):
        backend = make(*args, **kwargs)
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        await backend.aclose()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Which marathons should I run this autumn?", "u:run"),
        ("Recommend an electric car to replace my old one", "u:car"),
        ("How do index funds work?", "u:money"),
    ],
)
async def test_the_relevant_event_ranks_first(backends, method, query, expected):
    backend = backends(method)
    await backend.ingest("u", history("u"))
    ctx = await backend.context("u", query, 2000)
    assert ctx.form == "raw"
    assert ctx.event_ids[0] == expected
    assert list(ctx.scores) == ctx.event_ids
    assert [ctx.scores[i] for i in ctx.event_ids] == sorted(ctx.scores.values(), reverse=True)
    assert ctx.text.splitlines()[0].startswith(f"[{expected}]")
    assert ctx.tokens == count_tokens(ctx.text)


async def test_bm25_returns_only_events_sharing_a_term_with_the_query(backends):
    backend = backends("bm25")
    await backend.ingest("u", history("u"))
    assert (await backend.context("u", "peanut allergies", 2000)).event_ids == ["u:diet"]  # stemmed: peanuts, allergic
    assert (await backend.context("u", "zyzzyva quokka", 2000)).event_ids == []


async def test_k_and_the_budget_cut_the_ranking(backends):
    backend = backends("dense", k=3)
    await backend.ingest("u", history("u"))
    assert len((await backend.context("u", "my life", 4000)).event_ids) == 3
    tight = await backend.context("u", "my life", 25)
    assert count_tokens(tight.text) <= 25 and len(tight.event_ids) < 3


@pytest.mark.parametrize("method", METHODS)
async def test_previous_turns_resolve_a_vague_follow_up(backends, method):
    query = MemoryQuery(
        text="Nice. What would it cost me per month?",
        previous_turns=[
            "I want to buy a new car, can you help?",
            "Which electric cars are cheap to run?",
        ],
    )
    alone = backends(method)
    with_turns = backends(method, conversation={"turns": 2})
    for backend in (alone, with_turns):
        await backend.ingest("u", history("u"))
    assert (await with_turns.context("u", query, 2000)).event_ids[0] == "u:car"
    assert (await alone.context("u", query, 2000)).event_ids[:1] != ["u:car"]


async def test_concatenated_turns_search_once(backends):
    backend = backends("dense", conversation={"turns": 1, "mode": "concat"})
    query = MemoryQuery(text="And the cheapest?", previous_turns=["old", "Which electric cars are cheap to run?"])
    assert await backend.query_texts(query) == ["Which electric cars are cheap to run?\nAnd the cheapest?"]
    await backend.ingest("u", history("u"))
    assert (await backend.context("u", query, 2000)).event_ids[0] == "u:car"


async def test_fusion_searches_the_query_then_earlier_turns_most_recent_first(backends):
    backend = backends("bm25", conversation={"turns": 2})
    query = MemoryQuery(text="now", previous_turns=["first", "second", "third"])
    assert await backend.query_texts(query) == ["now", "third", "second"]


async def test_users_never_see_each_others_events_in_one_store(backends, tmp_path):
    for method in METHODS:
        backend = backends(method, store=tmp_path / method)
        await backend.ingest("alice", history("alice"))
        await backend.ingest("bob", history("bob"))
        for user in ("alice", "bob"):
            ctx = await backend.context(user, "vegetarian marathon cats index funds guitar electric car", 4000)
            assert len(ctx.event_ids) == 6
            assert all(i.startswith(f"{user}:") for i in ctx.event_ids)
        assert (await backend.context("carol", "marathon", 4000)).event_ids == []


async def test_in_memory_instances_do_not_share_collections(backends):
    first, second = backends("dense"), backends("dense")
    await first.ingest("u", history("u"))
    assert (await second.context("u", "marathon", 4000)).event_ids == []
    assert (await first.context("u", "marathon", 4000)).event_ids[0] == "u:run"


async def test_a_second_instance_on_the_store_recalls_without_re_embedding(backends, tmp_path):
    first = backends("hybrid", store=tmp_path)
    await first.ingest("u", history("u"))
    assert first.dense.embedder.documents_embedded == 6
    expected = await first.context("u", "Which marathons should I run?", 2000)

    second = backends("hybrid", store=tmp_path)
    recalled = await second.context("u", "Which marathons should I run?", 2000)
    assert recalled.event_ids == expected.event_ids
    assert recalled.scores == pytest.approx(expected.scores)
    await second.ingest("u", history("u") + [MemorySnippet(id="u:new", text="I started learning Portuguese.")])
    assert second.dense.embedder.documents_embedded == 1  # only the new event
    assert (await second.context("u", "learning Portuguese", 2000)).event_ids[0] == "u:new"


def test_passages_are_overlapping_windows_that_cover_the_text():
    text = " ".join(f"w{i}" for i in range(25))
    assert passages("short text", 10, 2) == ["short text"]
    windows = passages(text, 10, 2)
    assert [w.split()[0] for w in windows] == ["w0", "w8", "w16"]
    assert windows[-1].split()[-1] == "w24" and all(len(w.split()) <= 10 for w in windows)
    assert windows[0].split()[-2:] == windows[1].split()[:2]  # consecutive windows share `overlap` words
    assert passages(" ".join(f"w{i}" for i in range(18)), 10, 2) == [
        " ".join(f"w{i}" for i in range(10)),
        " ".join(f"w{i}" for i in range(8, 18)),
    ]


def long_chat(user: str) -> ChatSession:
    """A chat whose one mention of sourdough comes after ~200 words of something else."""
    filler = " ".join(["We talked about tax forms, invoices and the deadlines of the quarterly VAT return."] * 14)
    return ChatSession(
        id=f"{user}:long",
        timestamp="2025-04-01",
        messages=[
            ChatMessage(role="user", content=filler),
            ChatMessage(
                role="assistant", content="Also: your sourdough starter needs feeding twice a day with rye flour."
            ),
        ],
    )


async def test_a_long_event_is_found_by_a_passage_beyond_the_models_window(backends, tmp_path):
    events = history("u") + [long_chat("u")]
    passaged = backends("dense", store=tmp_path / "p", k=3)
    truncated = backends("dense", store=tmp_path / "t", k=3, passage_words=100000, passage_overlap=0)
    for backend in (passaged, truncated):
        await backend.ingest("u", events)
    query = "How often should I feed my sourdough starter?"
    found = await passaged.context("u", query, 4000)
    assert found.event_ids[0] == "u:long" and len(found.event_ids) == len(set(found.event_ids)) == 3
    assert "u:long" not in (await truncated.context("u", query, 4000)).event_ids[:1]  # MiniLM never reads the end
    assert passaged.dense.embedder.documents_embedded == 6 + 2
    again = backends("dense", store=tmp_path / "p", k=3)
    await again.ingest("u", events)  # every event, long or not, is already whole in the store
    assert again.dense.embedder.documents_embedded == 0
    assert (await again.context("u", query, 4000)).event_ids == found.event_ids


async def test_recall_looks_deeper_when_one_events_passages_fill_the_nearest_places(backends):
    sourdough = MemorySnippet(
        id="u:bread",
        text=" ".join(["My sourdough starter smells sour and my sourdough loaves come out flat and dense."] * 4),
    )
    backend = backends("dense", k=2, candidates=2, passage_words=14, passage_overlap=0)
    await backend.ingest("u", history("u") + [sourdough])
    ranking = backend.dense.search("u", ["why are my sourdough loaves flat?"], 2)[0]
    assert len(ranking) == 2 and next(iter(ranking)) == "u:bread"
    assert (await backend.context("u", "why are my sourdough loaves flat?", 4000)).event_ids[0] == "u:bread"


def test_passage_settings_are_checked():
    with pytest.raises(ValidationError, match="passage_overlap"):
        make("dense", passage_words=50, passage_overlap=50)


async def test_an_event_id_with_the_passage_separator_is_refused(backends):
    backend = backends("dense")
    with pytest.raises(DataError, match="x1f"):
        await backend.ingest("u", [MemorySnippet(id="u:bad\x1fid", text="text")])


def test_the_event_store_names_a_corrupted_file_and_line(tmp_path):
    store = EventStore(tmp_path)
    store.add("u", history("u")[:2])
    path = tmp_path / f"{user_key('u')}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + json.dumps({"user_id": "u", "event": {"kind": "memory_snippet"}}) + "\n")
    with pytest.raises(DataError) as caught:
        EventStore(tmp_path).events("u")
    assert caught.value.file == str(path) and caught.value.line == 2


async def test_expansion_calls_the_gateway_once_per_recall_tagged_recall(backends):
    gateway = Gateway({"system": ModelSettings(), "memory": ModelSettings()})
    for kind in ("cot", "pseudo_history"):
        backend = backends("bm25", gateway=gateway, expansion=kind)
        await backend.ingest("u", history("u"))
        before = len(gateway.ledger.entries)
        ctx = await backend.context("u", MemoryQuery(text="Which marathons?", previous_turns=["I like running"]), 2000)
        calls = gateway.ledger.entries[before:]
        assert [(c.role, c.node, c.kind, c.dry_run) for c in calls] == [("memory", "recall", "text", True)]
        assert set(ctx.event_ids) <= {e.id for e in history("u")}
        texts = await backend.query_texts(MemoryQuery(text="Which marathons?"))
        assert (
            len(texts) == 1 and texts[0].startswith("Which marathons?\n") and len(texts[0]) > len("Which marathons?\n")
        )


def test_expansion_prompts_follow_bespoke_and_fence_the_query():
    cot = expansion_messages("cot", "Which marathons?")
    assert "think step by step to infer the key aspects" in cot[1]["content"]
    assert "<data>\nWhich marathons?\n</data>" in cot[1]["content"]
    pseudo = expansion_messages("pseudo_history", "Which marathons?", [ConversationTurn(utterance="I like running")])
    assert "Output ONLY the history text." in pseudo[1]["content"]
    assert "# The conversation so far\n<data>\nuser: I like running\n</data>" in pseudo[1]["content"]


async def test_profile_form_summarises_the_retrieved_events_in_one_call(backends):
    gateway = Gateway({"system": ModelSettings(), "memory": ModelSettings()})
    backend = backends("dense", gateway=gateway, form="profile", k=3)
    await backend.ingest("u", history("u"))
    ctx = await backend.context("u", "Which marathons should I run?", 300)
    assert ctx.form == "profile"
    assert [(c.node, c.kind) for c in gateway.ledger.entries] == [("recall", "structured")]
    assert count_tokens(ctx.text) <= 300 and ctx.tokens == count_tokens(ctx.text)
    top_three = list(backend.rank("u", ["Which marathons should I run?"]))[:3]
    assert sorted(ctx.event_ids) == sorted(top_three)  # cited ones first, then the rest it was built from
    assert set(ctx.scores) == set(ctx.event_ids)


def test_config_is_typed_and_checked():
    with pytest.raises(ValidationError, match="candidates"):
        make("dense", k=20, candidates=10)
    with pytest.raises(ValidationError):
        make("tfidf")
    with pytest.raises(ValidationError):
        make("dense", conversation={"turns": 2, "decay": 0})


def test_reciprocal_rank_fusion_sums_weighted_reciprocal_ranks():
    fused = reciprocal_rank_fusion([{"a": 9.0, "b": 1.0}, {"b": 0.9, "c": 0.1}], k=60)
    assert list(fused) == ["b", "a", "c"]
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["c"] == pytest.approx(1 / 62)


def test_turn_mixture_weights_per_turn_softmax_distributions():
    mixed = turn_mixture([{"a": 0.9, "b": 0.1}, {"b": 0.5}], weights=[1.0, 0.5], temperature=0.1)
    pa = 1 / (1 + math.exp(-8))
    assert mixed["a"] == pytest.approx(pa)
    assert mixed["b"] == pytest.approx(1 - pa + 0.5)
    assert list(mixed) == ["a", "b"]
    assert weighted_sum([{"x": 1.0}, {"y": 3.0, "x": 2.0}], [1.0, 0.5]) == {"x": 2.0, "y": 1.5}
