"""Memory as a tool (issue 34, item 3): `memory_access = upfront | tool | both`, the `recall_memory`
tool served by the system's memory backend, its ledger lines (never counted as model calls), the
response's recall count, and history-retrieval scoring and the report covering tool recalls."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from atelier.agents.answerer import recall_before_answering
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.ledger import Ledger, capture_calls, ledger_totals, read_ledger, read_tool_calls
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Query
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.memory_tool import RECALL_MEMORY, RECALL_MEMORY_TOOL, MemoryAccessOptions, recall_memory
from atelier.graphs.pipelines import pipeline_options
from atelier.graphs.rag import build_rag_graph
from atelier.graphs.resources import release, resources_for
from atelier.memory.base import MemoryQuery
from atelier.runs.folder.results import ContextUsed, ResultRecord
from atelier.runs.reading.comparisons import _history_values, recalled_event_ids
from atelier.tools.config import WebConfig

BM25 = {"backend": "retrieval", "method": "bm25"}
FULL = {"backend": "full"}
SMALL: dict[str, Any] = {"max_queries": 1, "max_pages": 1}


def context(tmp_path, memory: dict[str, Any] | None = None, **options: Any) -> EpisodeContext:
    return EpisodeContext(
        run_id=f"t-{uuid.uuid4().hex[:6]}",
        run_dir=str(tmp_path / "run"),
        system=SystemSpec(name="rag-mem", pipeline="rag", memory=memory or BM25, pipeline_options=options),
        judges=[],
        web=WebConfig(cache_dir=tmp_path / "web"),
    )


def tool_turns(monkeypatch, *turns: list[str] | Exception) -> list[list[dict[str, str]]]:
    """Answer the memory-tool turns with these queries (an exception: that turn fails); every other
    request goes to the scripted model. Returns the turns' messages as asked."""
    asked: list[list[dict[str, str]]] = []
    original = Gateway.structured
    pending = list(turns)

    async def structured(self, role, messages, schema):
        if schema.__name__ != "ToolTurn":
            return await original(self, role, messages, schema)
        asked.append(messages)
        turn = pending.pop(0) if pending else []
        if isinstance(turn, Exception):
            raise turn
        calls = [{"name": RECALL_MEMORY, "arguments": {"query": q}} for q in turn]
        return schema.model_validate({"content": "", "tool_calls": calls})

    monkeypatch.setattr(Gateway, "structured", structured)
    return asked


async def run_rag(ctx: EpisodeContext, case_id: str) -> SystemResponse:
    try:
        out = await build_rag_graph().ainvoke({"benchmark": "sample", "case_id": case_id}, context=ctx)
    finally:
        await release(ctx)
    return out["response"]


# ----------------------------------------------------------------------------- the ledger


def test_a_tool_call_is_a_ledger_line_but_never_a_model_call(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="r")
    with capture_calls() as captured:
        ledger.record(role="writer", model="scripted", call_id="m1", prompt_tokens=10, completion_tokens=5)
        tool = ledger.record_tool(RECALL_MEMORY, "t1", {"query": "diet"}, {"event_ids": ["u1:m1"]})
    assert (tool.node, tool.role, tool.kind, tool.model, tool.prompt_tokens) == (
        RECALL_MEMORY,
        RECALL_MEMORY,
        "tool",
        "",
        0,
    )
    assert [e.call_id for e in ledger.entries] == ["m1"]  # what every in-process tally reads
    assert [e.call_id for e in ledger.tool_entries] == ["t1"]
    assert ledger.totals()["calls"] == 1
    assert ledger_totals([*ledger.entries, tool])["calls"] == 1  # handed one anyway, it is left out
    assert [e.call_id for e in captured] == ["m1", "t1"]  # a worker ships both back to the driver
    driver = Ledger(None)
    driver.append(list(captured))
    assert ([e.call_id for e in driver.entries], [e.call_id for e in driver.tool_entries]) == (["m1"], ["t1"])
    # on disk: both lines; read back, the model calls only unless the tool calls are asked for
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 2
    assert [e.call_id for e in read_ledger(tmp_path / "ledger.jsonl")] == ["m1"]
    assert [e.call_id for e in read_ledger(tmp_path / "ledger.jsonl", tools=True)] == ["m1", "t1"]
    recalls = read_tool_calls(tmp_path / "ledger.jsonl", RECALL_MEMORY)
    assert [(e.tool_input, e.tool_output) for e in recalls] == [({"query": "diet"}, {"event_ids": ["u1:m1"]})]
    assert read_tool_calls(tmp_path / "ledger.jsonl", "search") == []


# ----------------------------------------------------------------------------- options


def test_memory_access_is_a_typed_option_of_rag():
    assert MemoryAccessOptions().memory_access == "upfront"
    options = pipeline_options("rag", {"memory_access": "tool", "max_recalls": 2})
    assert isinstance(options, MemoryAccessOptions)
    assert (options.memory_access, options.max_recalls, options.recalls_upfront, options.recall_tool) == (
        "tool",
        2,
        False,
        True,
    )
    both = pipeline_options("rag", {"memory_access": "both"})
    assert isinstance(both, MemoryAccessOptions) and both.recalls_upfront
    with pytest.raises(ConfigError, match="memory_access"):
        pipeline_options("rag", {"memory_access": "sometimes"})
    with pytest.raises(ConfigError, match="max_recalls only applies with memory_access = 'tool' or 'both'"):
        pipeline_options("rag", {"max_recalls": 5})
    # a recipe's options are validated again from their dump (defaults included): still accepted
    assert pipeline_options("rag", pipeline_options("rag", {}).model_dump()).model_dump()["memory_access"] == "upfront"


def test_the_tool_spec_is_an_openai_function_taking_a_query():
    function = RECALL_MEMORY_TOOL["function"]
    assert RECALL_MEMORY_TOOL["type"] == "function" and function["name"] == RECALL_MEMORY
    assert function["parameters"]["required"] == ["query"]
    assert function["parameters"]["properties"]["query"]["type"] == "string"


# ----------------------------------------------------------------------------- recall_memory


async def test_recall_memory_asks_the_backend_for_the_query_and_records_query_and_event_ids(tmp_path):
    case = next(c for c in load_cases("sample") if c.id == "q01")
    view = case.view(case.setting)
    ctx = context(tmp_path)
    resources = resources_for(ctx)
    try:
        recall = await recall_memory(resources, view, "what they eat")  # a fresh backend: ingests first
        expected = await resources.memory.context(view.user_id, MemoryQuery(text="what they eat"))
    finally:
        await release(ctx)
    assert recall.event_ids and recall.event_ids == expected.event_ids
    assert recall.text == expected.text
    assert all(e.startswith(view.user_id + ":") for e in recall.event_ids)
    (line,) = resources.gateway.ledger.tool_entries
    assert (line.node, line.tool_input) == (RECALL_MEMORY, {"query": "what they eat"})
    assert line.tool_output is not None and line.tool_output["event_ids"] == recall.event_ids
    assert resources.gateway.ledger.entries == []  # the bm25 recall made no model call


# ----------------------------------------------------------------------------- rag


async def test_rag_with_the_tool_recalls_on_the_scripted_model_and_counts_each_recall(tmp_path):
    """The scripted model's own answers call the tool: over a few cases some recall, and each
    episode's meta count is its `recall_memory` ledger lines."""
    counts = {}
    for case_id in ("q01", "q02", "q03", "q04"):
        ctx = context(tmp_path / case_id, memory_access="tool", max_recalls=3, **SMALL)
        response = await run_rag(ctx, case_id)
        lines = read_tool_calls(tmp_path / case_id / "run" / "ledger.jsonl", RECALL_MEMORY)
        meta = response.meta
        assert meta["memory_access"] == "tool"
        assert meta["memory_recalls"] == len(lines) == len(meta["recalled_memory"]) <= 3
        # a turn's recalls run side by side: the ledger holds them in the order they finished
        asked = sorted((r["query"], r["event_ids"]) for r in meta["recalled_memory"])
        assert asked == sorted(((e.tool_input or {})["query"], (e.tool_output or {})["event_ids"]) for e in lines)
        assert all(e.case_id is None or e.case_id == case_id for e in lines)
        assert all(e.caller == "answer" for e in lines)
        no_memory = [d for d in response.degraded if "rests on no memory" in d.detail]
        assert bool(no_memory) == (not lines)
        counts[case_id] = len(lines)
    assert sum(counts.values()) > 0, counts


async def test_with_the_tool_the_writer_sees_what_was_recalled_and_nothing_upfront(tmp_path, monkeypatch):
    asked = tool_turns(monkeypatch, ["budget for hostels and flights"], [])
    prompts: list[tuple[str, str]] = []
    original = Gateway.text

    async def text(self, role, messages):
        prompts.append((role, messages[-1]["content"]))
        return await original(self, role, messages)

    monkeypatch.setattr(Gateway, "text", text)
    ctx = context(tmp_path, memory_access="tool", **SMALL)
    response = await run_rag(ctx, "q01")
    (recalled,) = response.meta["recalled_memory"]
    assert response.meta["memory_recalls"] == 1 and recalled["query"] == "budget for hostels and flights"
    assert len(asked) == 2  # the second turn saw the first recall, and called nothing more
    assert recalled["text"] and "u1:m03" in recalled["event_ids"]  # the hostel snippet
    assert "budget for hostels and flights" in asked[1][-1]["content"]
    assert recalled["text"].splitlines()[0] in asked[1][-1]["content"]  # the next turn saw what came back
    writer = next(p for role, p in prompts if role == "writer")
    assert recalled["text"].splitlines()[0] in writer  # the answer is written from what was recalled
    assert "What you know about the user" not in asked[0][-1]["content"]  # no upfront context with `tool`
    assert response.meta["critical_path_calls"] == 2 + 2
    assert not response.degraded or all("rests on no memory" not in d.detail for d in response.degraded)


async def test_a_model_that_never_calls_the_tool_is_recorded_as_answering_on_no_memory(tmp_path, monkeypatch):
    tool_turns(monkeypatch, [])
    response = await run_rag(context(tmp_path, memory_access="tool", **SMALL), "q01")
    assert response.meta["memory_recalls"] == 0
    (fallback,) = [d for d in response.degraded if d.kind == "step_fallback"]
    assert fallback.step == "answer" and "rests on no memory" in fallback.detail


async def test_both_keeps_the_upfront_context_and_no_recall_there_is_not_degraded(tmp_path, monkeypatch):
    asked = tool_turns(monkeypatch, [])
    response = await run_rag(context(tmp_path, memory_access="both", **SMALL), "q01")
    assert "What you know about the user" in asked[0][-1]["content"]
    assert response.meta["memory_recalls"] == 0
    assert not [d for d in response.degraded if "rests on no memory" in d.detail]


async def test_upfront_is_unchanged_no_tool_offered(tmp_path, monkeypatch):
    asked = tool_turns(monkeypatch, ["never asked"])
    response = await run_rag(context(tmp_path, **SMALL), "q01")
    assert asked == [] and response.meta["memory_access"] == "upfront"
    assert "memory_recalls" not in response.meta and response.meta["critical_path_calls"] == 2


async def test_recalls_stay_within_the_budget_and_a_repeated_query_ends_the_lookups(tmp_path, monkeypatch):
    asked = tool_turns(monkeypatch, ["diet", "sport", "diet", "work"], ["more", "and more"])
    response = await run_rag(context(tmp_path, memory_access="tool", max_recalls=2, **SMALL), "q01")
    assert [r["query"] for r in response.meta["recalled_memory"]] == ["diet", "sport"]  # the first two
    assert len(asked) == 1  # the budget was spent: no second turn
    asked = tool_turns(monkeypatch, ["Diet", "diet "], ["diet"], ["never reached"])
    response = await run_rag(context(tmp_path / "again", memory_access="tool", max_recalls=3, **SMALL), "q01")
    assert [r["query"] for r in response.meta["recalled_memory"]] == ["Diet"]
    assert len(asked) == 2  # the repeat ended it


async def test_a_query_that_echoes_the_tools_description_is_replaced_by_the_question(tmp_path, monkeypatch):
    echo = RECALL_MEMORY_TOOL["function"]["parameters"]["properties"]["query"]["description"]
    tool_turns(monkeypatch, [echo, "hostel budget"], [])
    response = await run_rag(context(tmp_path, memory_access="tool", **SMALL), "q01")
    question = next(c for c in load_cases("sample") if c.id == "q01").query.text
    queries = [r["query"] for r in response.meta["recalled_memory"]]
    assert queries == [" ".join(question.split())[:300], "hostel budget"]
    (invalid,) = [d for d in response.degraded if d.kind == "invalid_query"]
    assert invalid.step == "answer" and "echoes the tool's description" in invalid.detail


async def test_a_failed_tool_turn_is_recorded_and_the_answer_goes_on(tmp_path, monkeypatch):
    failure = ModelCallError("the provider said no", role="writer", model="scripted", attempts=3)
    tool_turns(monkeypatch, ["diet"], failure)
    response = await run_rag(context(tmp_path, memory_access="tool", **SMALL), "q01")
    assert response.meta["memory_recalls"] == 1 and response.text
    (fallback,) = [d for d in response.degraded if d.kind == "step_fallback"]
    assert fallback.step == "answer" and "the provider said no" in fallback.detail


async def test_recall_before_answering_shows_the_model_each_lookup():
    gateway = Gateway()  # scripted
    served: list[str] = []

    async def recall(query: str) -> str:
        served.append(query)
        return f"RESULT FOR {query}"

    looked = await recall_before_answering(
        gateway, Query(text="Which running shoes?"), "", RECALL_MEMORY_TOOL, recall, max_calls=3
    )
    assert [lookup.query for lookup in looked.lookups] == served and len(served) <= 3
    assert all(lookup.result == f"RESULT FOR {lookup.query}" for lookup in looked.lookups)
    assert 1 <= looked.turns <= 4 and looked.degraded == []


# ----------------------------------------------------------------------------- scoring and report


def _record(upfront: list[str], recalled: list[list[str]]) -> ResultRecord:
    meta = {"memory_recalls": len(recalled), "recalled_memory": [{"query": "q", "event_ids": ids} for ids in recalled]}
    return ResultRecord(
        key="c::s",
        run_id="r",
        case_id="c",
        system="s",
        benchmark="tiny",
        user_id="u1",
        setting="context",
        status="ok",
        response=SystemResponse(text="answer", meta=meta),
        user_context=ContextUsed(backend="retrieval", form="none", event_ids=upfront),
    )


def test_history_retrieval_scores_what_the_tool_recalled():
    class Gold:
        relevance: dict[str, int] = {}
        relevant_history_ids = ["u1:m2"]

    class Case:
        gold = Gold()

    tool_only = _record([], [["u1:m1", "u1:m2"]])
    assert recalled_event_ids(tool_only) == ["u1:m1", "u1:m2"]
    assert _history_values([tool_only], {"c": Case()}, "recall", 10) == [1.0]  # not 0: the tool found it
    both = _record(["u1:m3", "u1:m1"], [["u1:m1", "u1:m4"], ["u1:m2"]])
    assert recalled_event_ids(both) == ["u1:m3", "u1:m1", "u1:m4", "u1:m2"]  # upfront first, each once
    assert _history_values([both], {"c": Case()}, "recall", 3) == [0.0]  # 4th received: outside the top 3
    assert _history_values([_record(["u1:m1"], [])], {"c": Case()}, "recall", 10) == [0.0]


def test_a_run_records_no_upfront_recall_with_the_tool_and_its_report_shows_the_recalls(
    tmp_path, cache_dir, monkeypatch
):
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    original = Gateway.structured

    async def once(self, role, messages, schema):  # each episode recalls once, then answers
        if schema.__name__ != "ToolTurn":
            return await original(self, role, messages, schema)
        first = "What you looked up about the user so far" not in messages[-1]["content"]
        calls = [{"name": RECALL_MEMORY, "arguments": {"query": "half marathon training"}}] if first else []
        return schema.model_validate({"content": "", "tool_calls": calls})

    monkeypatch.setattr(Gateway, "structured", once)

    recipe = parse_recipe(
        {
            "name": "memory-access",
            "benchmark": {"name": "tiny", "limit": 2},
            "systems": [
                {"name": "upfront", "pipeline": "rag", "memory": FULL, "pipeline_options": SMALL},
                {
                    "name": "tool",
                    "pipeline": "rag",
                    "memory": FULL,
                    "pipeline_options": {**SMALL, "memory_access": "tool"},
                },
            ],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    folder = run_recipe(recipe, progress=False)
    records = [ResultRecord.model_validate_json(line) for line in folder.results.read_text().splitlines()]
    assert len(records) == 4 and all(r.ok for r in records)
    for record in records:
        assert record.response is not None and record.user_context is not None
        if record.system == "upfront":
            assert record.user_context.event_ids and "memory_recalls" not in record.response.meta
        else:  # the episode's upfront recall was skipped: the system's memory is what it recalled
            assert record.user_context.event_ids == [] and record.user_context.text == ""
            assert record.response.meta["memory_recalls"] == len(record.response.meta["recalled_memory"])
            assert record.response.meta["memory_recalls"] == 1
            assert recalled_event_ids(record) == record.response.meta["recalled_memory"][0]["event_ids"] != []
    lines = read_tool_calls(folder.ledger, RECALL_MEMORY)
    assert sorted((line.system, line.case_id) for line in lines) == [("tool", "tiny:0"), ("tool", "tiny:1")]
    summary = json.loads(folder.summary.read_text())
    assert summary["ledger"]["calls"] == len(read_ledger(folder.ledger))  # tool lines not counted
    assert summary["ledger"]["calls"] < len(read_ledger(folder.ledger, tools=True))
    report = folder.report.read_text()
    assert report.count("recalled through recall_memory: 1 call") == 2 and "half marathon training" in report


async def test_a_pipeline_run_alone_recalls_nothing_upfront_with_the_tool(tmp_path, monkeypatch):
    """Studio runs a pipeline graph alone: with `tool` it starts from no upfront context (the
    recalls are its own), with `upfront` from the backend's context."""
    tool_turns(monkeypatch, ["vegetarian"])
    for access, form_is_none in (("tool", True), ("upfront", False)):
        ctx = context(tmp_path / access, **SMALL, memory_access=access)
        try:
            updates = [
                u
                async for u in build_rag_graph().astream(
                    {"benchmark": "sample", "case_id": "q01"}, context=ctx, stream_mode="updates"
                )
            ]
        finally:
            await release(ctx)
        [recalled] = [u["retrieve"]["user_context"] for u in updates if "user_context" in u.get("retrieve", {})]
        assert (recalled.form == "none") is form_is_none, (access, recalled)
