"""Issue 41, item 7: the smaller defects. A resumed step's recall_memory lines are counted once;
`max_recalls` means one budget in rag and deep_research (per episode); `atelier recipe check --model`."""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import read_ledger, read_tool_calls
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.memory_tool import RECALL_MEMORY
from atelier.graphs.rag import build_rag_graph
from atelier.graphs.resources import release
from atelier.graphs.serde import serializer
from atelier.tools.config import WebConfig
from tests.test_memory_tool import tool_turns


class Killed(Exception):
    """The process died here (a kill: nothing after it in this session)."""


async def test_a_resumed_step_writes_its_recalls_again_but_the_ledger_counts_them_once(tmp_path, monkeypatch):
    tool_turns(monkeypatch, ["diet", "training"], [], ["diet", "training"], [])  # the same turns when run again
    original = Gateway.text
    failed = []

    async def writer_killed_once(self, role, messages):
        if role == "writer" and not failed:  # the step dies after its recalls, as a kill would end it
            failed.append(True)
            raise Killed
        return await original(self, role, messages)

    monkeypatch.setattr(Gateway, "text", writer_killed_once)
    ctx = EpisodeContext(
        run_id=f"t-{uuid.uuid4().hex[:6]}",
        run_dir=str(tmp_path / "run"),
        system=SystemSpec(
            name="rag-tool",
            pipeline="rag",
            memory={"backend": "full"},
            pipeline_options={"memory_access": "tool", "max_queries": 1, "max_pages": 1},
        ),
        judges=[],
        web=WebConfig(cache_dir=tmp_path / "web"),
    )
    graph = build_rag_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": "sample:q01::rag-tool"}}
    try:
        with pytest.raises(Killed):
            await graph.ainvoke({"benchmark": "sample", "case_id": "q01"}, config, context=ctx)
        out = await graph.ainvoke(None, config, context=ctx)  # resumed: the answer step runs again
    finally:
        await release(ctx)
    ledger = tmp_path / "run" / "ledger.jsonl"
    lines = [e for e in read_ledger(ledger, tools=True) if e.node == RECALL_MEMORY]
    assert len(lines) == 4  # both sessions wrote theirs
    assert out["response"].meta["memory_recalls"] == 2 == len(read_tool_calls(ledger, RECALL_MEMORY))


async def test_max_recalls_is_one_budget_per_episode_in_rag_and_in_both_deep_research_designs(tmp_path, monkeypatch):
    """A model that recalls at every chance: rag's answer step, deep_research's brief and every
    agentic researcher together make at most `max_recalls` recall_memory calls."""
    from atelier.agents.supervisor import ToolTurnAnswer
    from tests.test_deep_research_agentic import _run

    turns = {"n": 0}

    async def recalls_every_turn(gateway, role, messages, tools, forced=None):
        turns["n"] += 1
        names = {t["function"]["name"] for t in tools}
        if "conduct_research" in names:
            calls = [{"name": "conduct_research", "arguments": {"topic": f"topic {i}"}} for i in range(2)]
            return ToolTurnAnswer.model_validate({"tool_calls": calls})
        calls = [
            {"name": RECALL_MEMORY, "arguments": {"query": f"what does the user like {turns['n']} {i}"}}
            for i in range(2)
        ]
        calls.append({"name": "search", "arguments": {"query": f"lisbon hotels {turns['n']}"}})
        return ToolTurnAnswer.model_validate({"tool_calls": calls})

    monkeypatch.setattr("atelier.graphs.deep_research.agentic.tool_turn", recalls_every_turn)
    tool_turns(monkeypatch, ["diet"], [])  # the brief's author recalls once
    response, values, ledger, _ = await _run(
        tmp_path, "q01", "retrieval", memory_access="tool", max_recalls=3, max_rounds=1, max_researchers=2
    )
    recalls = [e for e in ledger if e.node == RECALL_MEMORY]
    assert len(values["recalls"]) == 1  # the brief's
    assert response.meta["memory_recalls"] == len(recalls) == 3  # the researchers shared the 2 left
    assert sorted(len(f.recalls) for f in values["findings"]) == [1, 1]


def test_recipe_check_takes_model_as_run_does(tmp_path, capsys, monkeypatch):
    from tests.test_cli_errors import atelier, the_error

    recipe = tmp_path / "real.toml"
    recipe.write_text(
        'name = "real"\n[benchmark]\nname = "tiny"\n[models.system]\nmodel = "openai/gpt-4o-mini"\n'
        '[[systems]]\nname = "d"\npipeline = "direct"\nmemory = { backend = "none" }\n'
        '[[judges]]\nname = "lampqa_aspects"\n'
    )
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 2 and "judge" in the_error(err)  # the judge would be answered by `scripted`, unasked
    code, out, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe), "--model", "scripted")
    assert code == 0, err
    assert out.strip().endswith("models: system scripted, lampqa_judge scripted")


def test_the_viewer_marks_a_resumed_episode_and_cuts_its_stop_from_the_timeline(tmp_path, monkeypatch, cache_dir):
    import time

    import lxml.html

    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe
    from atelier.runs.reading.view import RunViewData, render_episode, render_index

    recipe = parse_recipe(
        {
            "name": "stopped",
            "benchmark": {"name": "tiny", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [{"name": "direct", "pipeline": "direct", "memory": {"backend": "full"}}],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    original = Gateway.text
    stopped = []

    async def dies_once(self, role, messages):
        if role == "system" and not stopped:
            stopped.append(time.time())
            raise Killed("the process died here")
        return await original(self, role, messages)

    monkeypatch.setattr(Gateway, "text", dies_once)
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    time.sleep(3)  # the run stands stopped
    folder = run_recipe(recipe, tmp_path / "run", progress=False)  # resumed at the step that died
    data = RunViewData(folder.path)
    [row] = data.rows()
    assert row.status == "ok" and row.resumed_from
    episode = data.episode(row)
    moments = [s.end for s in episode.steps] + [c.end for s in episode.steps for c in s.calls]
    assert max(moments) - min(s.start for s in episode.steps) > 3  # the record spans the stop
    assert episode.stopped_s >= 3 and episode.span_s < 3  # the axis does not
    assert episode.stopped_at is not None and 0 < episode.stopped_at < 100
    page = lxml.html.fromstring(render_episode(data, row.page.split("/")[-1]) or "")
    assert "resumed by a later process" in page.xpath('//*[@id="resumed"]')[0].text_content()
    assert page.xpath('//*[@id="stop-mark"]') and "stopped left out" in page.text_content()
    index = lxml.html.fromstring(render_index(data))
    assert index.xpath('//tr[@class="episode"]//span[contains(@class, "resumed")]')
