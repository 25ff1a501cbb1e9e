"""Plan review (`review_plan = true`): the graph stops with the plan before any researcher starts; a
typed resume accepts it or gives an edited plan, which is what the researchers then research; a
resume that cannot be used is answered by asking again with what was wrong."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from atelier.graphs.deep_research.graph import build_deep_research_graph
from atelier.graphs.deep_research.review import PlanReview, ReviewedTopic, parse_review
from atelier.graphs.resources import release
from atelier.graphs.serde import serializer
from tests.test_pipelines import SMALL, context
from tests.test_studio import CASE, _client, studio  # noqa: F401 (a fixture: `langgraph dev` on a free port)

EDITED = {"accept": False, "subtopics": [{"title": "Budget hotels near Alfama", "queries": ["alfama budget hotel"]}]}


async def _first_stop(tmp_path, design: str):
    ctx = context(
        tmp_path, "deep_research", answerer="person", design=design, review_plan=True, clarify="never", **SMALL
    )
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": f"review-{design}"}}
    first = await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
    return ctx, graph, config, first


@pytest.mark.parametrize("design", ["plan", "agentic"])
async def test_a_bad_resume_asks_again_and_the_edited_plan_is_what_the_researchers_research(tmp_path, design):
    ctx, graph, config, first = await _first_stop(tmp_path, design)
    try:
        [pending] = first["__interrupt__"]
        shown = pending.value
        assert shown["design"] == design and 1 <= len(shown["subtopics"]) <= SMALL["max_researchers"]
        assert shown["problem"] is None and (await graph.aget_state(config)).next == ("review_plan",)
        assert not (await graph.aget_state(config)).values.get("findings")  # no researcher has started
        again = await graph.ainvoke(Command(resume={"accept": False}), config, context=ctx)
        problem = again["__interrupt__"][0].value["problem"]
        assert "could not be used" in problem and "needs at least one sub-topic" in problem
        too_many = {"accept": False, "subtopics": [{"title": f"t{i}"} for i in range(3)]}
        again = await graph.ainvoke(Command(resume=too_many), config, context=ctx)
        assert "3 sub-topics, at most 2" in again["__interrupt__"][0].value["problem"]
        assert again["__interrupt__"][0].value["subtopics"] == shown["subtopics"]  # the same plan, shown again
        out = await graph.ainvoke(Command(resume=EDITED), config, context=ctx)
        findings = (await graph.aget_state(config)).values["findings"]
    finally:
        await release(ctx)
    assert [f.topic for f in findings if f.round == 1] == ["Budget hotels near Alfama"]
    assert out["response"].meta["plan_review"] == {"status": "edited", "by": "person", "subtopics": 1}


@pytest.mark.parametrize("design", ["plan", "agentic"])
async def test_an_accepted_plan_is_researched_as_shown(tmp_path, design):
    ctx, graph, config, first = await _first_stop(tmp_path, design)
    try:
        shown = [t["title"] for t in first["__interrupt__"][0].value["subtopics"]]
        out = await graph.ainvoke(Command(resume={"accept": True}), config, context=ctx)
        findings = (await graph.aget_state(config)).values["findings"]
    finally:
        await release(ctx)
    assert sorted(f.topic for f in findings if f.round == 1) == sorted(shown)
    assert out["response"].meta["plan_review"]["status"] == "accepted"


def test_the_resume_value_is_typed():
    assert parse_review(PlanReview(), 2).accept
    edited = parse_review(EDITED, 2)
    assert edited.subtopics == [ReviewedTopic(title="Budget hotels near Alfama", queries=["alfama budget hotel"])]
    for bad in [{"accept": False}, {"accept": "maybe"}, {"subtopics": [{"title": ""}]}, {"plan": []}, 42]:
        with pytest.raises(ValueError):
            parse_review(bad, 2)


@pytest.mark.battery  # its own langgraph dev server for one test
async def test_studio_draws_the_agentic_graph_and_stops_at_the_plan_review(studio):
    """Over HTTP with langgraph-sdk, as LangGraph Studio drives it: the agentic nodes are drawn, the
    thread stops at the plan review with the plan as JSON, asks again on a bad resume, and researches
    the edited plan."""
    client = _client(studio)
    [assistant] = await client.assistants.search(graph_id="deep_research")
    drawn = await client.assistants.get_graph(assistant["assistant_id"], xray=True)
    names = {node["id"] for node in drawn["nodes"]}
    assert {"supervisor", "review_plan", "plan", "write_report"} <= names
    assert {"agent_researcher:act", "agent_researcher:tools", "agent_researcher:compress"} <= names
    context = {
        "system": {
            "name": "dr-agentic",
            "pipeline": "deep_research",
            "pipeline_options": {**SMALL, "design": "agentic", "review_plan": True, "clarify": "never"},
        }
    }
    thread = (await client.threads.create())["thread_id"]
    first = await client.runs.wait(thread, "deep_research", input=CASE, context=context)
    [pending] = first["__interrupt__"]
    assert pending["value"]["design"] == "agentic" and pending["value"]["subtopics"]
    assert (await client.threads.get_state(thread))["next"] == ["review_plan"]
    again = await client.runs.wait(thread, "deep_research", command={"resume": {"accept": False}}, context=context)
    assert "needs at least one sub-topic" in again["__interrupt__"][0]["value"]["problem"]
    await client.runs.wait(thread, "deep_research", command={"resume": EDITED}, context=context)
    final = (await client.threads.get_state(thread))["values"]
    assert final["response"]["meta"]["plan_review"] == {"status": "edited", "by": "person", "subtopics": 1}
    assert [f["topic"] for f in final["findings"] if f["round"] == 1] == ["Budget hotels near Alfama"]


async def test_a_run_with_no_one_to_review_researches_the_plan_and_records_the_review_as_skipped(tmp_path):
    ctx = context(
        tmp_path, "deep_research", answerer="none", design="agentic", review_plan=True, clarify="never", **SMALL
    )
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q01"}, context=ctx)
    finally:
        await release(ctx)
    assert "__interrupt__" not in out
    assert out["response"].meta["plan_review"]["status"] == "skipped"


@pytest.mark.parametrize("design", ["plan", "agentic"])
async def test_the_simulated_user_reviews_the_plan_in_a_run(tmp_path, design):
    from atelier.agents.models.ledger import capture_calls
    from atelier.benchmarks.registry import load_cases
    from atelier.graphs.simulate import run_with_simulated_user

    ctx = context(
        tmp_path, "deep_research", answerer="simulated_user", design=design, review_plan=True, clarify="never", **SMALL
    )
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": f"simulated-{design}"}}
    case = next(c for c in load_cases("sample") if c.id == "q01")
    try:
        with capture_calls() as calls:
            out = await run_with_simulated_user(graph, case, config, ctx)
        state = (await graph.aget_state(config)).values
    finally:
        await release(ctx)
    review = out["response"].meta["plan_review"]
    assert review["by"] == "simulated_user" and review["status"] in ("accepted", "edited"), review
    assert [c.node for c in calls if c.role == "user_sim"] == ["review_plan"]  # one review, tagged with its node
    planned = [t["title"] for t in state["plan"]]
    assert review["subtopics"] == len(planned) <= SMALL["max_researchers"]
    assert sorted({f.topic for f in state["findings"] if f.round == 1}) == sorted(planned)  # what was reviewed ran


class Verdict:
    """A gateway double answering the plan review with a fixed verdict."""

    def __init__(self, data: dict) -> None:
        self.data = data
        self.messages: list[list[dict]] = []

    async def structured(self, role, messages, schema):
        assert role == "user_sim"
        self.messages.append(messages)
        return schema.model_validate(self.data)


@pytest.mark.parametrize(
    ("verdict", "accept", "subtopics", "fallback"),
    [
        ({"accept": True, "reason": "Covers it."}, True, [], None),
        ({"accept": False, "subtopics": ["", "  ", "###STOP###"]}, True, [], "named no usable sub-topic (3 given)"),
        (
            {"accept": False, "subtopics": ["Costs", "costs ", "Visas", "Flights"]},
            False,
            ["Costs", "Visas"],
            "had 3 sub-topics; its first 2",
        ),
        ({"accept": False, "subtopics": ["Night trains"]}, False, ["Night trains"], None),
        # SmolLM2's answer: the field's description as the reason
        ({"accept": True, "reason": "Why, in one sentence,"}, True, [], "its reason was dropped"),
        (
            {"accept": False, "subtopics": ["The sub-topics to research instead", "Night trains"]},
            False,
            ["Night trains"],
            "a sub-topic was dropped: 'The sub-topics to research instead' is the schema's own text",
        ),
    ],
)
async def test_the_simulated_users_verdict_is_held_to_what_a_reviewer_can_send(verdict, accept, subtopics, fallback):
    from atelier.agents.user_sim.plan_review import review_plan_as_user
    from atelier.benchmarks.registry import load_cases

    gateway = Verdict(verdict)
    case = load_cases("tiny", limit=1)[0]
    review = await review_plan_as_user(gateway, case, ["Budget", "Routes"], 2)  # type: ignore[arg-type]
    assert (review.accept, review.subtopics) == (accept, subtopics)
    assert (review.fallback is None) if fallback is None else (fallback in review.fallback)
    parse_review(review.resume_value(), 2)  # what the graph is resumed with is a valid review
    prompt = gateway.messages[0][-1]["content"] + gateway.messages[0][1]["content"]
    assert "1. Budget" in prompt and "2. Routes" in prompt and "at most 2" in prompt


async def test_the_simulated_user_sends_no_gold_in_its_plan():
    from atelier.agents.user_sim.plan_review import review_plan_as_user
    from atelier.benchmarks.registry import load_cases
    from tests.conftest import GOLD_SENTINEL

    gateway = Verdict({"accept": False, "subtopics": [f"{GOLD_SENTINEL} need 0", "Prices"], "reason": GOLD_SENTINEL})
    review = await review_plan_as_user(gateway, load_cases("tiny", limit=1)[0], ["Budget"], 2)  # type: ignore[arg-type]
    assert not any(GOLD_SENTINEL in t for t in [*review.subtopics, review.reason]) and review.redacted >= 3


async def test_a_review_the_code_had_to_change_is_a_degraded_step_of_the_response(tmp_path):
    ctx, graph, config, first = await _first_stop(tmp_path, "plan")
    try:
        fell_back = {"accept": True, "fallback": "the simulated user named no usable sub-topic"}
        out = await graph.ainvoke(Command(resume=fell_back), config, context=ctx)
    finally:
        await release(ctx)
    steps = [(d.kind, d.step) for d in out["response"].degraded]
    assert ("step_fallback", "review_plan") in steps
    assert out["response"].meta["plan_review"]["status"] == "accepted"


async def test_a_long_verdict_still_makes_a_valid_review():
    from atelier.agents.user_sim.plan_review import review_plan_as_user
    from atelier.benchmarks.registry import load_cases

    many = [f"Costs of option {chr(65 + i % 26)}{chr(65 + i // 26)}" for i in range(60)]
    gateway = Verdict(
        {"accept": False, "subtopics": many + ["The sub-topics to research instead"] * 40, "reason": "why " * 2000}
    )
    review = await review_plan_as_user(gateway, load_cases("tiny", limit=1)[0], ["Budget"], 2)  # type: ignore[arg-type]
    parsed = parse_review(review.resume_value(), 2)  # within the resume value's limits
    assert [t.title for t in parsed.subtopics or []] == many[:2] and parsed.fallback and len(parsed.reason) <= 500
