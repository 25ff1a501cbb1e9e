"""History synthesis under PDR-Bench's annotation protocol, checked in code; the reversibility check;
the contexts file the pdr loader reads; the same seed giving the same history (cache); writing that
survives a weak model: budgets raised on cut answers, drafts that fail the content checks written
again, a failing trait costing only its own items, a second session writing only what is missing."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim import (
    HistoryOptions,
    check_protocol,
    check_reversibility,
    plan_history,
    synthesize_history,
)
from atelier.agents.user_sim.history import history_rules
from atelier.agents.user_sim.persona import persona_traits, preference_tags
from atelier.agents.user_sim.reversibility import INVERSE_ROLE, Verdicts
from atelier.benchmarks.loaders.pdr import (
    ContextDialogue,
    ContextMemory,
    ContextMessage,
    ContextRecord,
    context_history,
    read_language,
)
from atelier.benchmarks.loaders.sample import load_suite
from atelier.benchmarks.registry import load_cases
from tests.test_cli_e2e import lines


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
    allowed = {
        "pdr": {"memory", "dialogue"},
        "bespoke": {"search", "chat"},
        "mixed": {"memory", "dialogue", "search", "chat"},
    }
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

    asks = [
        "Could you find me a quiet place to study near campus?",
        "Which bus goes to the science museum on Sunday?",
        "Remind me to call my parents after the algorithms lecture.",
    ]

    def chat(i):
        return [ContextMessage(role="user", content=asks[i]), ContextMessage(role="assistant", content="Sure, done.")]

    record = ContextRecord(
        userid="User1",
        memories=[
            ContextMemory(id="m1", content="a note", trait=tag),
            ContextMemory(id="m2", content="x", trait="Made > Up"),
        ],
        dialogues=[ContextDialogue(id=f"d{i}", messages=chat(i), trait=tag) for i in range(3)],
    )
    figures = check_protocol(user1, record)
    assert not figures.ok and figures.counted_by == "labels" and not figures.content_failures
    assert figures.items_per_tag[tag] == 4 and len(figures.tags_below_minimum) == 20
    assert figures.conversational_share == 0.6
    assert figures.unlinked_items == ["m2"]
    problems = " | ".join(figures.problems)
    assert "20 preference tag(s) with fewer than 5 items that pass the content checks" in problems
    assert "conversational share 60% of the counted items is outside 20%-50%" in problems
    assert "1 item(s) not linked to a trait of this persona: m2" in problems


def test_the_protocol_check_reads_the_hand_written_sample_histories():
    suite = load_suite()
    attributes = suite.personas["u1"].attributes()
    events = suite.contexts["u1"]
    record = ContextRecord(
        userid="u1",
        memories=[ContextMemory(id=e.id, content=e.text, trait=e.trait) for e in events if e.type == "memory_snippet"],
        dialogues=[
            ContextDialogue(
                id=e.id, messages=[ContextMessage(role=m.role, content=m.content) for m in e.messages], trait=e.trait
            )
            for e in events
            if e.type in ("dialogue", "chat_session")
        ],
    )
    figures = check_protocol(attributes, record)
    assert not figures.unlinked_items and 0.2 <= figures.conversational_share <= 0.5
    assert figures.tags_below_minimum  # the bundled suite is small: too few items per tag, and it says so


class RecordingGateway:
    """Answers structured requests with `answer(schema, messages)`; records every request."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, list[dict], str]] = []

    def settings(self, role):
        from atelier.agents.models.settings import ModelSettings

        return ModelSettings()

    async def structured(self, role, messages, schema):
        self.requests.append((role, messages, schema.__name__))
        return schema.model_validate(self.answer(schema, messages))


async def test_reversibility_infers_from_the_history_alone_then_compares(user1):
    traits = persona_traits(user1)
    occupation = next(t for t in traits if t.path.endswith("Occupation"))
    diet = next(t for t in traits if t.path.endswith("Diet"))
    events = context_history(
        ContextRecord(
            userid="User1",
            memories=[ContextMemory(id=f"m{i}", content=f"note {i} about code and noodles") for i in range(50)],
        )
    )

    def answer(schema, messages):
        if schema.__name__ == "InferredProfile":  # two chunks: 40 + 10 items
            return {
                "facets": [
                    {"facet": occupation.path, "inferred": "studies computer science", "evidence": ["m1"]},
                    {"facet": diet.path, "inferred": "likes noodles"},
                ]
            }
        assert issubclass(schema, Verdicts)
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
    assert report.evidence == {occupation.path: ["m1"]}  # the ids the inverse pass cited, per facet


async def test_reversibility_of_an_empty_history_is_zero_without_a_call(user1):
    gateway = RecordingGateway(lambda schema, messages: pytest.fail("no call expected"))
    report = await check_reversibility(gateway, user1, [])
    assert report.recovered_share == 0.0 and report.counts["missed"] == report.traits and not gateway.requests


def test_the_same_seed_gives_the_same_history_from_the_cache_and_another_seed_another(tmp_path, cache_dir):
    from atelier.runs.studies.simulate_history import HistoryJob, run_history_job

    def job(seed):
        return HistoryJob(users=["User2"], options=HistoryOptions(seed=seed), check=False)

    first = run_history_job(job(0), tmp_path / "a")
    again = run_history_job(job(0), tmp_path / "b")
    other = run_history_job(job(1), tmp_path / "c")
    text = lambda d: (tmp_path / d / "contexts_en.jsonl").read_text()
    assert text("a") == text("b") and text("a") != text("c")
    assert first["ledger"]["provider_calls"] == first["ledger"]["calls"] > 0
    assert again["ledger"]["cache_hits"] == again["ledger"]["calls"] == first["ledger"]["calls"]
    assert other["ledger"]["provider_calls"] > 0
    assert first["overall"]["protocol_ok"] and first["dry_run"] is True


async def test_synthesis_and_its_checks_run_over_litellms_http_path():
    from atelier.agents.models.settings import ModelSettings
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


# --------------------------------------------------------------------------- writing that survives a real model


def one_tag_persona(attributes: dict, keep: str) -> dict:
    """The persona with every preference tag but `keep` left out (its other facets kept, so the
    prompt is mostly the persona's own words, as it is for a whole persona)."""

    def walk(node, path):
        out = {}
        for key, value in node.items():
            here = f"{path} > {key}" if path else key
            if isinstance(value, dict):
                sub = walk(value, here)
                if sub:
                    out[key] = sub
            elif here == keep or not any(m in here.casefold() for m in ("preference", "interest", "appetite")):
                out[key] = value
        return out

    return walk(attributes, "")


class TraitWriter(Gateway):
    """The scripted writer, with faults by trait: `fail` traits never get a valid answer (a
    StructuredOutputError, as the gateway raises after its repair); with `echo_first`, first drafts
    copy the schema's field descriptions into the fields and put names in place of dialogue turns."""

    def __init__(self, fail: set[str] = frozenset(), echo_first: bool = False) -> None:
        super().__init__({"history_writer": ModelSettings()})
        self.fail, self.echo_first = fail, echo_first
        self.requests: list[tuple[str, str]] = []  # (trait, prompt)

    async def structured(self, role, messages, schema):
        from atelier.agents.models.gateway import StructuredOutputError
        from atelier.agents.user_sim.history import REJECTED_TITLE, TRAIT_TITLE

        prompt = messages[-1]["content"]
        trait = prompt.split(f"# {TRAIT_TITLE}\n", 1)[1].split(": ", 1)[0]
        self.requests.append((trait, prompt))
        if trait in self.fail:
            raise StructuredOutputError(
                f"{role} model scripted gave no valid {schema.__name__} after one repair "
                "(json_object mode): not valid JSON",
                role=role,
                model="scripted",
                attempts=2,
                raw="{",
            )
        answer = await super().structured(role, messages, schema)
        if self.echo_first and f"# {REJECTED_TITLE}" not in prompt:
            for memory in getattr(answer, "memories", []):
                memory.title, memory.content = "A clear, short title.", "The note itself, first person, 1-3 sentences."
            for dialogue in getattr(answer, "dialogues", []):
                for turn in dialogue.turns:
                    turn.user, turn.assistant = "Liam Chen", "The Assistant"
        return answer


async def test_a_trait_that_never_gets_a_valid_answer_costs_only_its_own_items(user1):
    tag = preference_tags(persona_traits(user1))[2].path
    writer = TraitWriter(fail={tag})
    events = []
    history = await synthesize_history(writer, "User1", user1, HistoryOptions(), on_event=events.append)
    plan_size = len(history.plan)
    items = [*history.record.memories, *history.record.dialogues]
    assert len(items) == plan_size - 5 and all(i.trait != tag for i in items)  # the 127 others are kept
    report = history.traits[tag]
    assert report.status == "missing" and report.written == 0 and report.invalid_answers == 6
    assert len(report.reasons) == 5 and all(
        "invalid (draft 2): history_writer model scripted gave no valid" in r for r in report.reasons
    )
    assert all(t.status == "complete" for path, t in history.traits.items() if path != tag)
    # one request for the trait's five items, then each item on its own (a new sample), then given up
    asked = [prompt for trait, prompt in writer.requests if trait == tag]
    assert len(asked) == 6 and "memories (" in asked[0] and all("Earlier drafts of these items" in p for p in asked[1:])
    assert events == history.events and sum(e.kind == "accepted" for e in events) == plan_size - 5


async def test_a_second_session_writes_only_the_missing_items_and_keeps_the_rest(user1):
    tag = preference_tags(persona_traits(user1))[2].path
    first = await synthesize_history(TraitWriter(fail={tag}), "User1", user1, HistoryOptions())
    writer = TraitWriter()
    second = await synthesize_history(writer, "User1", user1, HistoryOptions(), prior=first.events)
    assert [trait for trait, _ in writer.requests] == [tag]  # finished items make no new call
    assert "draft 3 of some of these items" in writer.requests[0][1]  # the drafts are counted on
    assert "the answer was not valid JSON for the schema" in writer.requests[0][1]
    assert second.complete and len([*second.record.memories, *second.record.dialogues]) == len(second.plan)
    before = {i.id: i for i in [*first.record.memories, *first.record.dialogues]}
    after = {i.id: i for i in [*second.record.memories, *second.record.dialogues]}
    assert all(after[i] == item for i, item in before.items())  # the first session's items, as they were
    assert {e.trait for e in second.events} == {tag}


async def test_drafts_that_echo_the_schema_are_rejected_and_written_again(user1):
    writer = TraitWriter(echo_first=True)
    history = await synthesize_history(writer, "User1", user1, HistoryOptions())
    assert history.complete
    rejected = [e for e in history.events if e.kind == "rejected"]
    assert len(rejected) == len(history.plan) and all(e.attempt == 1 for e in rejected)
    details = " | ".join(e.detail for e in rejected)
    assert "template echo: title 'A clear, short title.' is the schema's own text" in details
    assert "name or role as content: turn 1 (user) 'Liam Chen' is a bare name" in details
    assert "name or role as content: turn 2 (assistant) 'The Assistant' is a role label" in details
    assert all(e.attempt == 2 for e in history.events if e.kind == "accepted")
    items = [*history.record.memories, *history.record.dialogues]
    assert not any(i.title == "A clear, short title." for i in items)
    assert check_protocol(user1, history.record, rules=history_rules(user1, "en")).ok


async def test_an_answer_cut_twice_is_asked_again_with_twice_the_budget():
    from tests.openai_stub import OpenAIStub

    attributes = one_tag_persona(
        read_language("en").personas["User1"].attributes,
        "Basic Attributes > Identity Characteristics > Academic Interests",
    )
    options = HistoryOptions(items_per_trait=0)
    with OpenAIStub() as stub:
        stub.script(["cut", "cut"])  # the answer and the gateway's repair, both cut at max_tokens
        settings = ModelSettings(
            model="openai/stub", api_base=stub.base_url, api_key="sk-test", max_retries=0, max_tokens=100
        )
        gateway = Gateway({"history_writer": settings})
        history = await synthesize_history(gateway, "User1", attributes, options)
    assert [r["body"]["max_tokens"] for r in stub.requests] == [100, 100, 200]
    assert [e.kind for e in history.events if e.kind != "accepted"] == ["budget_raised"]
    assert history.events[0].detail == "answer cut at max_tokens = 100: asked again with 200"
    assert history.complete and len(history.record.memories) + len(history.record.dialogues) == 5
    assert [e.finish_reason for e in gateway.ledger.entries] == ["length", "length", "stop"]


async def test_an_answer_cut_at_the_ceiling_is_asked_for_item_by_item():
    from atelier.agents.user_sim.history import WritingEffort
    from tests.openai_stub import OpenAIStub

    attributes = one_tag_persona(
        read_language("en").personas["User1"].attributes,
        "Basic Attributes > Identity Characteristics > Academic Interests",
    )
    with OpenAIStub() as stub:
        stub.script(["cut"] * 4)
        settings = ModelSettings(
            model="openai/stub", api_base=stub.base_url, api_key="sk-test", max_retries=0, max_tokens=100
        )
        history = await synthesize_history(
            Gateway({"history_writer": settings}),
            "User1",
            attributes,
            HistoryOptions(items_per_trait=0),
            effort=WritingEffort(max_tokens_ceiling=200),
        )
    assert [r["body"]["max_tokens"] for r in stub.requests] == [100, 100, 200, 200] + [100] * 5
    failed = [e for e in history.events if e.kind == "invalid"]
    assert len(failed) == 1 and len(failed[0].slots) == 5 and "cut at max_tokens = 200" in failed[0].detail
    assert history.complete and all(e.attempt == 2 for e in history.events if e.kind == "accepted")


def test_a_history_written_by_a_real_endpoint_is_no_dry_run(tmp_path, cache_dir):
    from atelier.runs.studies.simulate_history import HistoryJob, run_history_job
    from tests.openai_stub import OpenAIStub

    with OpenAIStub() as stub:
        settings = ModelSettings(model="openai/stub", api_base=stub.base_url, api_key="sk-test", max_retries=0)
        job = HistoryJob(users=["User1"], check=False, models={"history_writer": settings, "history_checker": settings})
        manifest = run_history_job(job, tmp_path / "h")
    assert stub.requests and manifest["dry_run"] is False  # no role of the gateway is answered by `scripted`
    entries = lines(tmp_path / "h" / "ledger.jsonl")
    assert entries and not any(e["dry_run"] for e in entries)


async def test_an_earlier_item_that_fails_todays_checks_is_rejected_and_written_again(user1):
    first = await synthesize_history(TraitWriter(), "User1", user1, HistoryOptions())
    accepted = [e for e in first.events if e.kind == "accepted"]
    stale = accepted[0].model_copy(update={"item": {**accepted[0].item, "title": "<name>"}})  # as an older check let by
    prior = [stale, *accepted[1:]]
    writer = TraitWriter()
    second = await synthesize_history(writer, "User1", user1, HistoryOptions(), prior=prior)
    [rejected] = [e for e in second.events if e.kind == "rejected"]
    assert rejected.slots == stale.slots and rejected.detail.startswith(
        "template echo: title '<name>' holds a placeholder"
    )
    assert rejected.detail.endswith("(found by a later session's checks)")
    assert [trait for trait, _ in writer.requests] == [stale.trait]  # only that item is written again
    assert second.complete
    [redone] = [e for e in second.events if e.kind == "accepted"]
    assert redone.slots == stale.slots and redone.attempt == 2 and redone.item["title"] != "<name>"


async def test_a_second_session_writes_what_was_never_attempted_before_it_redrafts(user1):
    tags = [t.path for t in preference_tags(persona_traits(user1))]
    first = await synthesize_history(TraitWriter(fail={tags[0]}), "User1", user1, HistoryOptions())
    # as if the first session had ended before the last tag was asked for
    prior = [e for e in first.events if e.trait != tags[-1]]
    writer = TraitWriter()
    await synthesize_history(writer, "User1", user1, HistoryOptions(), prior=prior)
    assert [trait for trait, _ in writer.requests] == [tags[-1], tags[0]]
