"""The systems under test (rag, planpers, deep_research) run as real graphs with the scripted model on
the sample suite and the sandbox web: citations checked in code, budgets, the clarify interrupt,
gold context with noise, the random-profile control, node tags and the run's web."""

from __future__ import annotations

import json
import uuid

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from atelier.agents.citations import cited_numbers
from atelier.agents.clarify import ClarifyAnswers, ClarifyRequest
from atelier.agents.models.gateway import Gateway
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.deep_research.graph import build_deep_research_graph
from atelier.graphs.inputs import gold_context
from atelier.graphs.planpers import build_planpers_graph
from atelier.graphs.rag import build_rag_graph
from atelier.graphs.resources import release, resources_for
from atelier.graphs.serde import serializer
from atelier.graphs.sources import SourceStore, text_sha256
from atelier.tools.config import WebConfig

SMALL = {"max_researchers": 2, "max_rounds": 2, "max_pages": 2, "max_tool_calls": 4}


def context(tmp_path, pipeline: str, memory: str = "none", answerer: str = "none", **options) -> EpisodeContext:
    return EpisodeContext(
        run_id=f"t-{uuid.uuid4().hex[:6]}",
        run_dir=str(tmp_path / "run"),
        system=SystemSpec(
            name=f"{pipeline}-{memory}", pipeline=pipeline, memory={"backend": memory}, pipeline_options=options
        ),
        judges=[],
        web=WebConfig(cache_dir=tmp_path / "web"),
        clarify_answerer=answerer,
    )


@pytest.fixture
def prompts(monkeypatch):
    """Every model request's messages, by the graph node that made it."""
    seen: list[tuple[str, str, str]] = []
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        from atelier.agents.models.ledger import current_tags

        seen.append((current_tags().get("node", ""), role, json.dumps(messages, ensure_ascii=False)))
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    return seen


def fetched_urls(ctx: EpisodeContext) -> set[str]:
    return {e.request["url"] for e in resources_for(ctx).web().log if e.kind == "fetch"}


async def test_deep_research_report_cites_fetched_sources_and_every_citation_resolves(tmp_path):
    ctx = context(tmp_path, "deep_research")
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q05"}, context=ctx)
        response = out["response"]
        cited = {c.source_id for c in response.citations}
        # a page two researchers want is noted once, by whichever claims it first
        # (graphs/deep_research/reads.py): the notes the writer sees, and so what it cites, vary with timing
        assert len(cited) >= 1
        store, fetched = SourceStore.for_run(ctx.run_dir), fetched_urls(ctx)
        for citation in response.citations:
            assert citation.url in fetched  # a page this run fetched through its web
            assert text_sha256(store.get(citation.sha256)) == citation.sha256  # exactly the text read
            # parsed, not the literal "[n]": a marker may cite several sources, "[3, 4]"
            assert citation.number in {
                n for numbers in cited_numbers(response.text.split("## Sources")[0]) for n in numbers
            }
            page = await resources_for(ctx).web().fetch(citation.url)  # the recorded page gives the same text
            assert text_sha256(page.text) == citation.sha256
        stats = response.meta["citations"]
        assert stats["unresolved_removed"] == 0 and stats["sources_cited"] == len(response.citations)
        assert response.text.rstrip().endswith(
            f"[{len(response.citations)}] {response.citations[-1].title}. {response.citations[-1].url}"
        )
        assert response.meta["clarify"]["status"] == "skipped"
    finally:
        await release(ctx)


async def test_a_citation_of_a_source_never_fetched_is_removed_and_counted(tmp_path, monkeypatch):
    original = Gateway.text

    async def writer_invents_a_source(self, role, messages):
        text = await original(self, role, messages)
        return text + "\nAs a forum post says [42]." if role == "writer" else text

    monkeypatch.setattr(Gateway, "text", writer_invents_a_source)
    ctx = context(tmp_path, "deep_research", **SMALL)
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q01"}, context=ctx)
        fetched = fetched_urls(ctx)
    finally:
        await release(ctx)
    response = out["response"]
    assert "As a forum post says." in response.text and "[42]" not in response.text
    assert response.meta["citations"]["unresolved_removed"] == 1
    assert response.meta["citations"]["unresolved_numbers"] == [42]
    assert response.citations and all(c.url in fetched for c in response.citations)


async def test_budgets_bound_researchers_rounds_pages_and_tool_calls(tmp_path):
    ctx = context(
        tmp_path, "deep_research", max_researchers=2, max_rounds=2, max_pages=2, max_tool_calls=3, report_tokens=300
    )
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "budgets"}}
    try:
        await graph.ainvoke({"benchmark": "sample", "case_id": "q05"}, config, context=ctx)
        findings = (await graph.aget_state(config)).values["findings"]
        assert resources_for(ctx).gateway.settings("writer").max_tokens == 300
    finally:
        await release(ctx)
    assert {f.round for f in findings} <= {1, 2}
    for round_ in {f.round for f in findings}:
        assert len([f for f in findings if f.round == round_]) <= 2
    for f in findings:
        assert f.searches + f.fetches <= 3 and len(f.sources) <= 2 and f.steps <= 2
        assert {n.source_id for n in f.notes} <= {s.id for s in f.sources}  # notes tied to sources read


async def test_every_llm_call_is_tagged_with_its_node_and_every_page_comes_through_the_runs_web(tmp_path, prompts):
    ctx = context(tmp_path, "deep_research", memory="full", **SMALL)
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q03"}, context=ctx)
        web_log = resources_for(ctx).web().log
        ledger = resources_for(ctx).gateway.ledger.entries
    finally:
        await release(ctx)
    assert ledger and all(e.node for e in ledger)
    nodes = {e.node for e in ledger}
    assert {"write_brief", "plan", "take_notes", "write_report"} <= nodes
    assert nodes <= {"clarify", "write_brief", "plan", "take_notes", "assess", "reflect", "write_report"}
    assert {(e.node, e.role) for e in ledger} >= {
        ("plan", "planner"),
        ("take_notes", "researcher"),
        ("write_report", "writer"),
    }
    assert any(e.kind == "search" for e in web_log) and any(e.kind == "fetch" for e in web_log)
    read = {s.url for f in [out["response"]] for s in f.citations}
    assert read <= {e.request["url"] for e in web_log if e.kind == "fetch"}


async def test_the_users_context_shapes_the_brief_and_the_brief_shapes_plan_and_report(tmp_path, prompts):
    ctx = context(tmp_path, "deep_research", memory="full", **SMALL)
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "personal"}}
    try:
        await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        state = (await graph.aget_state(config)).values
    finally:
        await release(ctx)
    by_node = {node: messages for node, _, messages in prompts}
    assert "vegetarian" in state["user_context"].text.lower()
    assert state["user_context"].text[:200] in json.loads(by_node["write_brief"])[1]["content"]
    brief = state["brief"]
    plan_prompt = json.loads(by_node["plan"])[1]["content"]
    assert all(fact in plan_prompt for fact in brief.user_facts) and brief.question in plan_prompt
    report_prompt = json.loads(by_node["write_report"])[1]["content"]
    assert brief.form.structure in report_prompt and brief.form.tone in report_prompt
    assert all(fact in report_prompt for fact in brief.user_facts)


async def test_clarify_interrupts_with_typed_questions_and_resumes_with_typed_answers(tmp_path, prompts):
    ctx = context(tmp_path, "deep_research", answerer="person", clarify="always", max_questions=2, **SMALL)
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "clarify"}}
    try:
        first = await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        [pending] = first["__interrupt__"]
        request = pending.value
        assert isinstance(request, ClarifyRequest) and 1 <= len(request.questions) <= 2
        assert (await graph.aget_state(config)).next == ("ask_user",)
        out = await graph.ainvoke(
            Command(resume=ClarifyAnswers(answers=["Lisbon in late May, 7 nights"])), config, context=ctx
        )
    finally:
        await release(ctx)
    clarify = out["response"].meta["clarify"]
    assert clarify["status"] == "answered" and clarify["questions"] == request.questions
    assert clarify["answers"][0] == "Lisbon in late May, 7 nights"
    assert clarify["answers"][1:] == ["I don't know"] * (len(request.questions) - 1)  # unanswered
    brief_prompt = next(m for node, _, m in prompts if node == "write_brief")
    assert "Lisbon in late May, 7 nights" in brief_prompt


@pytest.mark.parametrize("bad", [{"answers": ["a", "b", "c"]}, {"answer": "x"}, {"answers": "not a list"}, 42])
async def test_a_resume_that_cannot_be_used_is_answered_by_asking_again(tmp_path, bad):
    """The thread stays interrupted, the request says what was wrong, and a correct resume finishes."""
    ctx = context(tmp_path, "deep_research", answerer="person", clarify="always", max_questions=1, **SMALL)
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "bad-resume"}}
    try:
        first = await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        questions = first["__interrupt__"][0].value.questions
        again = await graph.ainvoke(Command(resume=bad), config, context=ctx)
        [pending] = again["__interrupt__"]
        assert pending.value.questions == questions and pending.value.problem
        assert "could not be used" in pending.value.problem and '{"answers": ["...", ...]}' in pending.value.problem
        if bad == {"answers": ["a", "b", "c"]}:
            assert "3 answers for 1 questions" in pending.value.problem
        assert (await graph.aget_state(config)).next == ("ask_user",)
        twice = await graph.ainvoke(Command(resume={"answer": "still wrong"}), config, context=ctx)
        assert twice["__interrupt__"][0].value.problem  # as often as it takes
        out = await graph.ainvoke(Command(resume={"answers": ["Lisbon, 7 nights"]}), config, context=ctx)
    finally:
        await release(ctx)
    assert out["response"].meta["clarify"]["answers"] == ["Lisbon, 7 nights"]
    assert out["response"].text


async def test_gold_context_replaces_search_with_the_cases_gold_information(tmp_path, prompts):
    [case] = [c for c in load_cases("sample") if c.id == "q02"]
    ctx = context(tmp_path, "rag", gold_context=True, max_pages=10)
    try:
        out = await build_rag_graph().ainvoke({"benchmark": "sample", "case_id": "q02"}, context=ctx)
    finally:
        await release(ctx)
    writer_prompt = next(m for node, _, m in prompts if node == "answer")
    assert all(claim in writer_prompt for claim in case.gold.information_claims)
    assert case.gold.information_need not in writer_prompt  # only the gold information, nothing else of gold
    assert [node for node, _, _ in prompts] == ["answer"]  # no queries were written
    assert out["response"].meta["gold_context"] == {
        "items": len(case.gold.information_claims),
        "noise": 0,
        "noise_ratio": 0.0,
    }
    assert all(c.url is None and c.source_id.startswith("g-") for c in out["response"].citations)


def test_noise_replaces_a_seeded_share_of_gold_with_other_users_unrelated_gold(tmp_path):
    cases = {c.id: c for c in load_cases("sample")}
    case = cases["q01"]
    store = SourceStore(tmp_path / "sources")
    ctx = EpisodeContext()
    texts = lambda gold: [store.get(s.sha256) for s in gold.sources]
    half = gold_context(case, ctx, 0.5, seed=1, store=store)
    assert half.noise == round(0.5 * len(case.gold.information_claims))
    kept = [t for t in texts(half) if t in case.gold.information_claims]
    assert len(kept) == len(case.gold.information_claims) - half.noise
    others = {claim: c for c in cases.values() for claim in c.gold.information_claims if c.id != case.id}
    for noise in (t for t in texts(half) if t not in case.gold.information_claims):
        donor = others[noise]
        assert donor.user_id != case.user_id and donor.task_id != case.task_id
    assert texts(gold_context(case, ctx, 0.5, seed=1, store=store)) == texts(half)  # seeded
    assert texts(gold_context(case, ctx, 0.5, seed=2, store=store)) != texts(half)
    assert all(t not in case.gold.information_claims for t in texts(gold_context(case, ctx, 1.0, seed=1, store=store)))


def test_a_case_without_gold_information_fails_that_system_with_a_clear_reason(tmp_path, cache_dir):
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    recipe = parse_recipe(
        {
            "name": "gold",
            "benchmark": {"name": "tiny", "limit": 1},
            "systems": [
                {"name": "direct", "memory": {"backend": "none"}},
                {
                    "name": "rag-gold",
                    "pipeline": "rag",
                    "memory": {"backend": "none"},
                    "pipeline_options": {"gold_context": True},
                },
            ],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    folder = run_recipe(recipe, progress=False)
    results = {r["system"]: r for r in map(json.loads, folder.results.read_text().splitlines())}
    assert results["direct"]["status"] == "ok"
    assert results["rag-gold"]["status"] == "error"
    assert "gold_context: case 'tiny:" in results["rag-gold"]["error"]
    assert "has no gold information" in results["rag-gold"]["error"]


async def test_random_profile_answers_with_another_users_context_chosen_by_the_seed(tmp_path, prompts):
    cases = {c.id: c for c in load_cases("sample")}
    ctx = context(tmp_path, "planpers", memory="full", random_profile=True, seed=3)
    graph = build_planpers_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "random"}}
    try:
        out = await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        user_context = (await graph.aget_state(config)).values["user_context"]
    finally:
        await release(ctx)
    donor = out["response"].meta["random_profile"]
    assert donor["user_id"] != cases["q01"].user_id == "u1"
    assert cases[donor["case_id"]].user_id == donor["user_id"]
    assert user_context.event_ids and all(e.startswith(donor["user_id"] + ":") for e in user_context.event_ids)
    plan_prompt = next(m for node, _, m in prompts if node == "plan")
    assert cases["q01"].query.text[:80] in plan_prompt  # the asker's question, another user's history
    assert out["response"].meta["plan"]


def test_pipeline_options_are_typed_and_a_typo_is_refused_with_its_key_path():
    from atelier.runs.folder.recipe import parse_recipe

    base = {"name": "t", "benchmark": {"name": "sample"}}

    def system(pipeline, options):
        return {
            **base,
            "systems": [
                {"name": "a", "pipeline": pipeline, "memory": {"backend": "none"}, "pipeline_options": options}
            ],
        }

    recipe = parse_recipe(system("deep_research", {"max_rounds": 3, "gold_context": True, "noise_ratio": 0.25}))
    options = recipe.systems[0].pipeline_options
    assert options["max_rounds"] == 3 and options["noise_ratio"] == 0.25 and options["max_researchers"] == 3
    unset = parse_recipe({**base, "systems": [{"name": "a", "pipeline": "rag", "memory": {"backend": "none"}}]})
    assert unset.systems[0].pipeline_options["max_pages"] == 4  # defaults resolved, as config.json records them
    assert parse_recipe(unset.model_dump(mode="python")).systems == unset.systems  # stable when read back
    for pipeline, options, message in [
        ("rag", {"max_pagess": 2}, "systems[0].pipeline_options.max_pagess: unknown key"),
        ("deep_research", {"max_rounds": 0}, "systems[0].pipeline_options.max_rounds: Input should be greater"),
        ("deep_research", {"noise_ratio": 0.5}, "systems[0].pipeline_options: noise_ratio only applies with"),
        ("planpers", {"gold_context": True}, "systems[0].pipeline_options.gold_context: unknown key"),
        ("direct", {"clarify": "always"}, "systems[0].pipeline_options.clarify: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_recipe(system(pipeline, options))


async def test_every_type_in_deep_research_state_is_registered_with_the_checkpoint_serializer(tmp_path, caplog):
    from atelier.agents.planner import ResearchBrief
    from atelier.graphs.deep_research.state import Findings

    ctx = context(tmp_path, "deep_research", memory="full", answerer="person", clarify="always", **SMALL)
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "serde"}}
    try:
        await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        await graph.ainvoke(Command(resume=ClarifyAnswers(answers=["May"])), config, context=ctx)
        values = (await graph.aget_state(config)).values
        history = [s async for s in graph.aget_state_history(config)]
    finally:
        await release(ctx)
    assert isinstance(values["brief"], ResearchBrief) and all(isinstance(f, Findings) for f in values["findings"])
    assert len(history) > 5
    assert not [r for r in caplog.records if "Blocked deserialization" in r.getMessage()]


async def test_deep_research_with_gold_context_reads_the_gold_information_and_never_the_web(tmp_path, prompts):
    [case] = [c for c in load_cases("sample") if c.id == "q14"]
    ctx = context(tmp_path, "deep_research", gold_context=True, noise_ratio=0.4, **SMALL)
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "gold"}}
    try:
        out = await graph.ainvoke({"benchmark": "sample", "case_id": "q14"}, config, context=ctx)
        findings = (await graph.aget_state(config)).values["findings"]
        store = resources_for(ctx).sources
    finally:
        await release(ctx)
    gold = out["response"].meta["gold_context"]
    assert gold["items"] == len(case.gold.information_claims) and gold["noise"] == round(0.4 * gold["items"])
    assert out["response"].meta["searches"] == 0 and out["response"].meta["fetches"] == 0
    read = {s.id: store.get(s.sha256) for f in findings for s in f.sources}
    assert len(read) == gold["items"] and all(s.kind == "gold" for f in findings for s in f.sources)
    kept = [text for text in read.values() if text in case.gold.information_claims]
    assert len(kept) == gold["items"] - gold["noise"]
    assert all(c.source_id in read and c.url is None for c in out["response"].citations)
    notes_prompts = [m for node, _, m in prompts if node == "take_notes"]
    assert all(any(text in m for m in notes_prompts) for text in read.values())


async def test_a_failed_note_taking_call_is_recorded_and_the_report_still_written(tmp_path, monkeypatch):
    from atelier.agents.models.gateway import StructuredOutputError

    original = Gateway.structured
    failed = []

    async def flaky(self, role, messages, schema):
        if schema.__name__ == "SourceNotes" and not failed:
            failed.append(True)
            raise StructuredOutputError(
                "no valid SourceNotes after one repair", role=role, model="m", attempts=2, raw="{"
            )
        return await original(self, role, messages, schema)

    monkeypatch.setattr(Gateway, "structured", flaky)
    ctx = context(tmp_path, "deep_research", **SMALL)
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q14"}, context=ctx)
    finally:
        await release(ctx)
    failures = [d for d in out["response"].degraded if d.kind == "step_fallback"]
    assert len(failures) == 1 and failures[0].step == "take_notes"
    assert failures[0].detail.startswith("source left out: notes from https://")
    assert "no valid SourceNotes" in failures[0].detail and out["response"].citations


@pytest.mark.parametrize(
    ("pipeline", "broken", "recorded"),
    [
        ("deep_research", "ResearchBrief", ("write_brief", "researching the question as asked")),
        ("deep_research", "ResearchPlan", ("plan", "one sub-topic, the whole question")),
        ("rag", "SearchQueries", ("retrieve", "search queries (searching the question as asked)")),
        ("planpers", "Aspects", ("plan", "answered without a plan")),
    ],
)
async def test_a_planning_step_a_model_cannot_do_falls_back_and_is_recorded(
    tmp_path, monkeypatch, pipeline, broken, recorded
):
    """A weak model that cannot fill a plan's schema still gets an answer, and the fallback is recorded."""
    from atelier.agents.models.gateway import StructuredOutputError

    original = Gateway.structured

    async def weak(self, role, messages, schema):
        if schema.__name__ == broken:
            raise StructuredOutputError(
                f"no valid {broken} after one repair", role=role, model="m", attempts=2, raw="{"
            )
        return await original(self, role, messages, schema)

    monkeypatch.setattr(Gateway, "structured", weak)
    ctx = context(tmp_path, pipeline, **(SMALL if pipeline == "deep_research" else {}))
    graph = {"deep_research": build_deep_research_graph, "rag": build_rag_graph, "planpers": build_planpers_graph}
    try:
        out = await graph[pipeline]().ainvoke({"benchmark": "sample", "case_id": "q01"}, context=ctx)
    finally:
        await release(ctx)
    assert out["response"].text.startswith("DRY RUN")
    step, what = recorded
    assert any(
        d.kind == "step_fallback" and d.step == step and d.detail.startswith(what) and f"no valid {broken}" in d.detail
        for d in out["response"].degraded
    ), out["response"].degraded
