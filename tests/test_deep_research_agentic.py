"""deep_research, design = "agentic": a supervisor calling tools over ReAct researchers, on the
scripted model (its tool calls come through the gateway's structured output as a `ToolTurn`):
parallel researchers within their budgets, notes tied to sources read, checked citations, a ledger
node per tool, termination whatever the model calls, and a report retried with fewer notes when
its prompt overflows the writer's context."""

from __future__ import annotations

import collections
import json

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.supervisor import ToolTurnAnswer
from atelier.graphs.deep_research.graph import build_deep_research_graph
from atelier.graphs.deep_research.nodes import context_overflowed, trimmed_notes
from atelier.graphs.resources import release, resources_for
from atelier.graphs.serde import serializer
from atelier.tools.web import capture_web_log
from tests.test_pipelines import context, prompts  # noqa: F401 (a fixture)

AGENTIC = {"design": "agentic", "max_researchers": 3, "max_rounds": 2, "max_pages": 3, "max_tool_calls": 6}
TOOL_NODES = {"clarify", "write_brief", "supervisor", "act", "read", "compress", "write_report"}


async def _run(tmp_path, case: str, memory: str = "none", **options):
    ctx = context(tmp_path, "deep_research", memory, **{**AGENTIC, **options})
    if memory == "retrieval":  # BM25 over the user's history: each query recalls other events
        system = ctx.system.model_copy(
            update={"memory": {"backend": "retrieval", "method": "bm25", "budget_tokens": 120}}
        )
        ctx = ctx.model_copy(update={"system": system})
    graph = build_deep_research_graph().copy(update={"checkpointer": InMemorySaver(serde=serializer())})
    config = {"configurable": {"thread_id": f"agentic-{case}"}}
    try:
        with capture_web_log() as log:
            out = await graph.ainvoke({"benchmark": "sample", "case_id": case}, config, context=ctx)
        values = (await graph.aget_state(config)).values
        ledger = list(resources_for(ctx).gateway.ledger.entries)  # the model calls
        tools = list(resources_for(ctx).gateway.ledger.tool_entries)  # recall_memory's lines
    finally:
        await release(ctx)
    return out["response"], values, ledger + tools, [e.request["url"] for e in log if e.kind == "fetch"]


@pytest.mark.parametrize("case", ["q01", "q05", "q14"])
async def test_the_agentic_design_researches_in_parallel_within_its_budgets_and_cites_what_it_read(tmp_path, case):
    response, values, ledger, fetched = await _run(tmp_path, case)
    meta, findings = response.meta, values["findings"]
    assert meta["design"] == "agentic" and 1 <= meta["supervisor_turns"] <= 4 and 1 <= meta["rounds"] <= 2
    assert findings and meta["fetches"] >= 1 and meta["notes"] >= 1  # the scripted model's calls make progress
    for round_ in {f.round for f in findings}:
        assert len([f for f in findings if f.round == round_]) <= 3
    for f in findings:
        assert f.fetches <= 3 and len(f.sources) <= 3 and f.steps <= 7
        assert {n.source_id for n in f.notes} <= {s.id for s in f.sources}  # notes tied to sources read
    assert not [url for url, n in collections.Counter(fetched).items() if n > 1]  # each URL fetched once
    assert {c.url for c in response.citations} <= set(fetched)
    assert response.meta["citations"]["sources_cited"] == len(response.citations)
    nodes = collections.Counter(e.node for e in ledger)
    assert set(nodes) <= TOOL_NODES and nodes["supervisor"] == meta["supervisor_turns"]
    assert {(e.node, e.role) for e in ledger} >= {
        ("supervisor", "planner"),
        ("act", "researcher"),
        ("read", "researcher"),
    }
    assert nodes["read"] == meta["fetches"]  # one note-taking call per page fetched, under the tool's node
    # the supervisor's first call conducted research, and the researchers' notes came back to it
    first = values["supervisor_messages"][2]
    assert first["role"] == "assistant" and first["tool_calls"][0]["function"]["name"] == "conduct_research"
    results = [m for m in values["supervisor_messages"] if m.get("name") == "conduct_research"]
    assert len(results) >= len([f for f in findings if f.round == 1])


async def test_a_model_that_never_stops_calling_tools_is_stopped_by_the_budgets(tmp_path, monkeypatch):
    """Every turn of the supervisor researches and thinks, every researcher turn searches: the
    supervisor's turns, the rounds and the tool calls end the episode."""
    from atelier.agents import supervisor as supervisor_module

    turns = collections.Counter()

    async def relentless(gateway, role, messages, tools, forced=None):
        names = {t["function"]["name"] for t in tools}
        turns[role] += 1
        if "conduct_research" in names:
            calls = [
                {"name": "conduct_research", "arguments": {"topic": f"topic {i} of turn {turns[role]}"}}
                for i in range(5)
            ]
            return ToolTurnAnswer.model_validate(
                {"tool_calls": [*calls, {"name": "think", "arguments": {"reflection": "more"}}]}
            )
        queries = [{"name": "search", "arguments": {"query": f"lisbon hotels {turns[role]} {i}"}} for i in range(4)]
        return ToolTurnAnswer.model_validate({"tool_calls": queries})

    monkeypatch.setattr("atelier.graphs.deep_research.agentic.tool_turn", relentless)
    response, values, _, _ = await _run(tmp_path, "q01", max_rounds=2, max_researchers=2, max_tool_calls=5)
    findings = values["findings"]
    assert response.meta["rounds"] == 2 and response.meta["supervisor_turns"] == 2
    assert len(findings) == 4 and all(f.searches <= 5 for f in findings)  # 2 of 5 topics a turn, 5 calls each
    over = [
        m for m in values["supervisor_messages"] if "Not run: at most 2 researchers per turn" in str(m.get("content"))
    ]
    assert len(over) == 2 * 3  # the calls over the budget were answered, not run
    assert turns["researcher"] <= 4 * 2  # each researcher: its budget spent in 2 turns, then it stopped
    assert supervisor_module.tool_turn is not relentless


async def test_tool_calls_come_through_structured_output_so_any_json_model_can_run_the_loop(tmp_path, monkeypatch):
    """The researcher's read tool offers only the URLs its searches found (an enum in the schema):
    a model cannot read a page no search found."""
    asked = []
    original = Gateway.structured

    async def spy(self, role, messages, schema):
        if schema.__name__ == "ToolTurn":
            asked.append((role, schema.model_json_schema()))
        return await original(self, role, messages, schema)

    monkeypatch.setattr(Gateway, "structured", spy)
    response, values, _, fetched = await _run(tmp_path, "q05")
    reads = [s for role, s in asked if role == "researcher" and "read" in json.dumps(s)]
    enums = [
        option["properties"]["arguments"]["properties"]["url"]["enum"]
        for _, s in asked
        for option in s["properties"]["tool_calls"]["items"].get("anyOf", [s["properties"]["tool_calls"]["items"]])
        if option["properties"]["name"].get("const") == "read"
    ]
    assert reads and enums and set(fetched) <= {url for enum in enums for url in enum}


def test_trimmed_notes_keep_half_of_them_evenly_across_sources_in_their_order():
    notes = [(1, "a"), (1, "b"), (1, "c"), (2, "d"), (3, "e"), (3, "f")]
    assert trimmed_notes(notes) == [(1, "a"), (2, "d"), (3, "e")]  # each source's first note first
    assert trimmed_notes([(1, "a")]) == []


def test_only_a_context_overflow_counts_as_one():
    import litellm

    overflow = ModelCallError("too long", role="writer", model="m", attempts=1, verdict="fatal")
    overflow.__cause__ = litellm.ContextWindowExceededError("prompt too long", model="m", llm_provider="openai")
    said = ModelCallError(
        "x", role="writer", model="m", attempts=1, server_message="request exceeds the context size of 2048 tokens"
    )
    other = ModelCallError("x", role="writer", model="m", attempts=1, server_message="invalid api key")
    assert context_overflowed(overflow) and context_overflowed(said) and not context_overflowed(other)


@pytest.mark.parametrize("design", ["plan", "agentic"])
async def test_a_report_that_overflows_the_writers_context_is_written_again_from_fewer_notes(
    tmp_path, monkeypatch, design
):
    original = Gateway.text
    seen_notes = []

    async def small_context(self, role, messages):
        if role == "writer":
            notes = messages[1]["content"].split("# Research notes", 1)[1].count("\n[")
            seen_notes.append(notes)
            if notes > 2:
                raise ModelCallError(
                    "writer: too long",
                    role=role,
                    model="m",
                    attempts=1,
                    verdict="fatal",
                    server_message="This model's maximum context length is 2048 tokens",
                )
        return await original(self, role, messages)

    monkeypatch.setattr(Gateway, "text", small_context)
    response, _, _, _ = await _run(tmp_path, "q01", design=design)  # a case with notes from several sources
    assert seen_notes[0] > 2 and seen_notes[-1] <= 2 and len(seen_notes) >= 2
    assert all(later < earlier for earlier, later in zip(seen_notes, seen_notes[1:]))
    [trimmed] = [d for d in response.degraded if d.step == "write_report" and d.kind == "step_fallback"]
    assert f"from {response.meta['report_notes']} of" in trimmed.detail and "maximum context length" in trimmed.detail


async def test_a_writer_failure_that_is_not_an_overflow_is_not_retried(tmp_path, monkeypatch):
    calls = []

    async def broken(self, role, messages):
        calls.append(role)
        raise ModelCallError(
            "writer: bad key", role=role, model="m", attempts=1, verdict="fatal", server_message="invalid api key"
        )

    monkeypatch.setattr(Gateway, "text", broken)
    with pytest.raises(ModelCallError, match="bad key"):
        await _run(tmp_path, "q05")
    assert calls == ["writer"]


@pytest.mark.parametrize("design", ["plan", "agentic"])
async def test_memory_as_a_tool_is_recalled_by_the_brief_step_and_the_agentic_researchers(tmp_path, design, prompts):
    response, values, ledger, _ = await _run(tmp_path, "q01", "retrieval", design=design, memory_access="tool")
    recalls = [e for e in ledger if e.node == "recall_memory"]
    meta = response.meta
    assert meta["memory_access"] == "tool" and meta["memory_recalls"] == len(recalls) >= 1
    assert len(meta["recalled_memory"]) == len(recalls)
    assert all(r["event_ids"] for r in meta["recalled_memory"])
    brief_prompt = next(m for node, _, m in prompts if node == "write_brief" and "ResearchBrief" in m)
    assert values["user_context"].form == "none" and not values["user_context"].text  # nothing recalled upfront
    assert meta["recalled_memory"][0]["text"][:100] in brief_prompt
    from_researchers = sum(len(f.recalls) for f in values["findings"])
    assert from_researchers == len(recalls) - len(values.get("recalls", []))
    if design == "plan":
        assert from_researchers == 0  # the planned design recalls at the brief step only


async def test_upfront_memory_offers_no_recall_tool(tmp_path):
    response, values, ledger, _ = await _run(tmp_path, "q01", "full", design="agentic")
    assert response.meta["memory_access"] == "upfront" and "memory_recalls" not in response.meta
    assert not [e for e in ledger if e.node == "recall_memory"]


async def test_a_second_run_of_the_same_episode_replays_every_call_from_the_cache(tmp_path):
    """Same prompts, same answers: the tool calls' ids and every prompt are deterministic, so a rerun
    over the recorded web is answered entirely by the response cache."""
    texts, hits = [], []
    for attempt in range(2):
        ctx = context(tmp_path, "deep_research", **AGENTIC).model_copy(update={"cache_dir": str(tmp_path / "cache")})
        ctx = ctx.model_copy(update={"run_id": f"replay-{attempt}"})
        try:
            out = await build_deep_research_graph().ainvoke({"benchmark": "sample", "case_id": "q05"}, context=ctx)
            entries = resources_for(ctx).gateway.ledger.entries
        finally:
            await release(ctx)
        texts.append(out["response"].text)
        hits.append([e.cache_hit for e in entries])
    assert texts[0] == texts[1] and len(hits[0]) == len(hits[1])
    assert hits[1] and all(hits[1])


@pytest.mark.battery
@pytest.mark.slow
def test_the_agentic_recipe_runs_through_the_openai_compatible_stub_and_both_systems_recall(tmp_path, cache_dir):
    """runs/recipes/agentic.toml on one case through litellm's real HTTP path: every episode scored,
    and the ledger holds recall_memory lines of the agentic researcher and of rag."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.openai_stub import OpenAIStub

    root = Path(__file__).resolve().parent.parent
    with OpenAIStub() as stub:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "atelier"), "run", str(root / "runs/recipes/agentic.toml"),
             "--limit", "1", "--no-progress", "--out", str(tmp_path / "run"),
             "--model", "openai/stub-model", "--api-base", stub.base_url, "--api-key", "sk-test"],
            cwd=root, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]  # 3: what the stub's answers degraded is said
    results = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 4 and all(r["status"] == "ok" and r["judgments"] for r in results)
    assert all(j["score"] is not None for r in results for j in r["judgments"])
    tools = [json.loads(line) for line in (tmp_path / "run" / "ledger.jsonl").read_text().splitlines()]
    recalled_by = {e["system"] for e in tools if e.get("node") == "recall_memory"}
    assert recalled_by == {"deep_research-agentic-recall", "rag-recall"}
