"""Plan review (`review_plan = true`): the graph stops with the plan before any researcher starts; a
typed resume accepts it or gives an edited plan, which is what the researchers then research; a
resume that cannot be used is answered by asking again with what was wrong."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphs.deep_research.graph import build_deep_research_graph
from graphs.deep_research.review import PlanReview, ReviewedTopic, parse_review
from graphs.resources import release
from graphs.serde import serializer
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
    assert out["response"].meta["plan_review"] == {"status": "edited", "subtopics": 1}


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
    assert final["response"]["meta"]["plan_review"] == {"status": "edited", "subtopics": 1}
    assert [f["topic"] for f in final["findings"] if f["round"] == 1] == ["Budget hotels near Alfama"]


@pytest.mark.parametrize("answerer", ["none", "simulated_user"])
async def test_a_run_with_no_person_to_review_researches_the_plan_and_records_the_review_as_skipped(tmp_path, answerer):
    ctx = context(
        tmp_path, "deep_research", answerer=answerer, design="agentic", review_plan=True, clarify="never", **SMALL
    )
    try:
        out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q01"}, context=ctx)
    finally:
        await release(ctx)
    assert "__interrupt__" not in out
    assert out["response"].meta["plan_review"]["status"] == "skipped"
