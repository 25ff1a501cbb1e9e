"""History synthesis under PDR-Bench's annotation protocol, checked in code; the reversibility check;
the contexts file the pdr loader reads; the same seed giving the same history (cache)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from agents.gateway import Gateway
from agents.user_sim import HistoryOptions, check_protocol, check_reversibility, plan_history, synthesize_history
from agents.user_sim.persona import persona_traits, preference_tags
from agents.user_sim.reversibility import INVERSE_ROLE, Verdicts
from benchmarks.loaders.pdr import ContextDialogue, ContextMemory, ContextMessage, ContextRecord, context_history, read_language
from benchmarks.loaders.sample import load_suite
from benchmarks.registry import load_cases


@pytest.fixture(scope="module")
def user1() -> dict:
    return read_language("en").personas["User1"].attributes


@pytest.mark.parametrize("style", ["pdr", "bespoke", "mixed"])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_plan_meets_the_protocol_whatever_the_seed(user1, style, seed):
    options = HistoryOptions(style=style, seed=seed, conversational_share=0.2 if seed == 7 else 0.5)
    plan = plan_history("User1", user1, options)
    per_trait = Counter(p.trait.path for p in plan)
    tags = preference_tags(persona_traits(user1))
    assert len(tags) == 20 and all(per_trait[t.path] == 5 for t in tags)
    assert all(per_trait[t.path] == 1 for t in persona_traits(user1) if not t.is_preference)
    share = sum(p.format in ("dialogue", "chat") for p in plan) / len(plan)
    assert 0.2 <= share <= 0.5
    allowed = {"pdr": {"memory", "dialogue"}, "bespoke": {"search", "chat"}, "mixed": {"memory", "dialogue", "search", "chat"}}
    assert {p.format for p in plan} <= allowed[style]
    start = options.end_date - dt.timedelta(days=options.period_days - 1)
    assert all(start <= p.date <= options.end_date for p in plan)


def test_the_plan_depends_on_the_seed_and_only_on_it(user1):
    a, b = (plan_history("User1", user1, HistoryOptions(seed=s)) for s in (0, 1))
    assert a == plan_history("User1", user1, HistoryOptions(seed=0))
    assert [(p.format, p.date) for p in a] != [(p.format, p.date) for p in b]


def test_options_outside_the_protocol_are_refused():
    for bad in ({"items_per_tag": 4}, {"conversational_share": 0.6}, {"conversational_share": 0.1}):
        with pytest.raises(ValueError):
            HistoryOptions(**bad)


async def test_a_synthesized_history_passes_the_protocol_and_the_loader_reads_it(user1, tmp_path):
    history = await synthesize_history(Gateway(), "User1", user1, HistoryOptions(seed=3))
    record = history.record
    figures = check_protocol(user1, record)
    assert figures.ok, figures.problems
    assert figures.items == len(history.plan) == 20 * 5 + (len(persona_traits(user1)) - 20)
    assert min(figures.items_per_tag.values()) == 5 and not figures.tags_below_minimum
    assert 0.2 <= figures.conversational_share <= 0.5 and figures.dialogues > 0 and figures.memories > 0
    assert not figures.unlinked_items and figures.traits_covered == figures.traits_total
    items = [*record.memories, *record.dialogues]
    assert len({i.id for i in items}) == len(items) and all(i.id.startswith("User1:") for i in items)
    assert all(d.messages[0].role == "user" and len(d.messages) % 2 == 0 for d in record.dialogues)

    path = tmp_path / "contexts_en.jsonl"
    path.write_text(json.dumps(record.model_dump(exclude_none=True)) + "\n")
    cases = load_cases("pdr", setting="context", options={"contexts_file": str(path), "users": ["User1"]})
    assert len(cases) == sum(q.userid == "User1" for q in read_language("en").queries) == 9
    assert {c.user_id for c in cases} == {"User1"}
    case = cases[0]
    assert len(case.history) == figures.items
    assert set(case.history_traits) == {e.id for e in case.history}  # every item linked to its trait
    view_json = case.view().model_dump_json()
    assert "history_traits" not in view_json and "Preferences and Interests > " not in view_json


def test_the_protocol_check_names_each_violation(user1):
    tag = preference_tags(persona_traits(user1))[0].path
    chat = [ContextMessage(role="user", content="hi"), ContextMessage(role="assistant", content="hello")]
    record = ContextRecord(
        userid="User1",
        memories=[ContextMemory(id="m1", content="a note", trait=tag), ContextMemory(id="m2", content="x", trait="Made > Up")],
        dialogues=[ContextDialogue(id=f"d{i}", messages=chat, trait=tag) for i in range(3)],
    )
    figures = check_protocol(user1, record)
    assert not figures.ok
    assert figures.items_per_tag[tag] == 4 and len(figures.tags_below_minimum) == 20
    assert figures.conversational_share == 0.6
    assert figures.unlinked_items == ["m2"]
    problems = " | ".join(figures.problems)
    assert "20 preference tag(s) with fewer than 5 items" in problems
    assert "conversational share 60% is outside 20%-50%" in problems
    assert "1 item(s) not linked to a trait of this persona: m2" in problems


def test_the_protocol_check_reads_the_hand_written_sample_histories():
    suite = load_suite()
    attributes = suite.personas["u1"].attributes()
    events = suite.contexts["u1"]
    record = ContextRecord(
        userid="u1",
        memories=[ContextMemory(id=e.id, content=e.text, trait=e.trait) for e in events if e.type == "memory_snippet"],
        dialogues=[ContextDialogue(id=e.id, messages=[ContextMessage(role=m.role, content=m.content) for m in e.messages],
                                   trait=e.trait) for e in events if e.type in ("dialogue", "chat_session")],
    )
    figures = check_protocol(attributes, record)
    assert not figures.unlinked_items and 0.2 <= figures.conversational_share <= 0.5
    assert figures.tags_below_minimum  # the bundled suite is small: too few items per tag, and it says so


class RecordingGateway:
    """Answers structured requests with `answer(schema, messages)`; records every request."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, list[dict], str]] = []

    async def structured(self, role, messages, schema):
        self.requests.append((role, messages, schema.__name__))
        return schema.model_validate(self.answer(schema, messages))


async def test_reversibility_infers_from_the_history_alone_then_compares(user1):
    traits = persona_traits(user1)
    occupation = next(t for t in traits if t.path.endswith("Occupation"))
    diet = next(t for t in traits if t.path.endswith("Diet"))
    events = context_history(ContextRecord(userid="User1", memories=[
        ContextMemory(id=f"m{i}", content=f"note {i} about code and noodles") for i in range(50)]))

    def answer(schema, messages):
        if schema.__name__ == "InferredProfile":  # two chunks: 40 + 10 items
            return {"facets": [{"facet": occupation.path, "inferred": "studies computer science", "evidence": ["m1"]},
                               {"facet": diet.path, "inferred": "likes noodles"}]}
        assert schema is Verdicts
        return {"verdicts": [{"facet": 1, "verdict": "recovered"}, {"facet": 1, "verdict": "missed"}]}

    gateway = RecordingGateway(answer)
    report = await check_reversibility(gateway, user1, events, chunk_items=40)
    inverse = [m for role, m, name in gateway.requests if name == "InferredProfile"]
    assert len(inverse) == 2 and all(role == "history_checker" for role, _, _ in gateway.requests)
    for messages in inverse:  # the inverse pass never sees the persona's values
        assert messages[0]["content"].startswith(INVERSE_ROLE)
        assert occupation.value not in json.dumps(messages) and diet.value not in json.dumps(messages)
    compare = [m for _, m, name in gateway.requests if name == "Verdicts"]
    assert len(compare) == 1  # only the two facets something was inferred for are compared
    assert "studies computer science / studies computer science" in compare[0][1]["content"]  # pooled over chunks
    # verdict 1 (the first facet in schema order) counts once; the facet the model skipped is missed
    first, second = sorted([occupation, diet], key=traits.index)
    assert report.per_trait[first.path] == "recovered" and report.per_trait[second.path] == "missed"
    assert report.counts == {"recovered": 1, "partial": 0, "missed": len(traits) - 1, "contradicted": 0}
    assert report.recovered_share == round(1 / len(traits), 4)


async def test_reversibility_of_an_empty_history_is_zero_without_a_call(user1):
    gateway = RecordingGateway(lambda schema, messages: pytest.fail("no call expected"))
    report = await check_reversibility(gateway, user1, [])
    assert report.recovered_share == 0.0 and report.counts["missed"] == report.traits and not gateway.requests


def test_the_same_seed_gives_the_same_history_from_the_cache_and_another_seed_another(tmp_path, cache_dir):
    from runs.simulate_history import HistoryJob, run_history_job

    def job(seed):
        return HistoryJob(users=["User2"], options=HistoryOptions(seed=seed), check=False)

    first = run_history_job(job(0), tmp_path / "a")
    again = run_history_job(job(0), tmp_path / "b")
    other = run_history_job(job(1), tmp_path / "c")
    text = lambda d: (tmp_path / d / "contexts_en.jsonl").read_text()  # noqa: E731
    assert text("a") == text("b") and text("a") != text("c")
    assert first["ledger"]["provider_calls"] == first["ledger"]["calls"] > 0
    assert again["ledger"]["cache_hits"] == again["ledger"]["calls"] == first["ledger"]["calls"]
    assert other["ledger"]["provider_calls"] > 0
    assert first["overall"]["protocol_ok"] and first["dry_run"] is True


async def test_synthesis_and_its_checks_run_over_litellms_http_path():
    from agents.settings import ModelSettings
    from tests.openai_stub import OpenAIStub

    attributes = load_suite().personas["u4"].attributes()
    tags = preference_tags(persona_traits(attributes))
    with OpenAIStub() as stub:
        settings = ModelSettings(model="openai/stub", api_base=stub.base_url, api_key="sk-test", max_retries=0)
        gateway = Gateway({"history_writer": settings, "history_checker": settings})
        history = await synthesize_history(gateway, "u4", attributes, HistoryOptions(items_per_trait=0, style="mixed"))
        writes = len(stub.requests)
        report = await check_reversibility(gateway, attributes, context_history(history.record))
    assert writes == len(tags) and len(history.plan) == 5 * len(tags)
    assert check_protocol(attributes, history.record).ok
    assert report.traits == len(persona_traits(attributes)) and sum(report.counts.values()) == report.traits
    assert {e.role for e in gateway.ledger.entries} == {"history_writer", "history_checker"}
    assert not any(e.dry_run for e in gateway.ledger.entries)
