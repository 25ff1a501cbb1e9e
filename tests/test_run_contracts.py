"""Issue 48: the run enforces every contract the kit checks.

A violation of each clause planted in a real run (the scripted model, the `tiny` benchmark, plugins
named by `module:attr` as a researcher's would be) is found in the run's degradations by the same
clause name the kit prints, and the run exits non-zero; clauses checked on the cases a run loads
refuse it before anything starts (exit 2), naming the clause. Provider answers that were cut, cut
off, filtered or left inside their reasoning are each recorded by name — and a stream cut at any
byte is never cached as a complete answer."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from atelier.agents.judges import contract as judge_contract
from atelier.agents.judges.base import JudgeResult, create_judge
from atelier.agents.models import answer_contract
from atelier.agents.models.answer_contract import recording_answers
from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import Grounding
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks import contract as benchmark_contract
from atelier.benchmarks.common.errors import DataError
from atelier.graphs import contract as pipeline_contract
from atelier.memory import contract as memory_contract
from atelier.runs.execution.runner import Runner
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile
from atelier.runs.reading.outcome import EXIT_FAILURES
from tests.research_api_stub import ResearchApiStub, stream_bytes
from tests.test_cli_errors import atelier

DOUBLES = "tests.conformance_doubles"
SOUND = {"name": "sound", "pipeline": "direct", "memory": {"backend": "full"}}


def run(tmp_path: Path, systems: list[dict], judges: list[dict], *, setting: str = "context", limit: int = 2):
    recipe = parse_recipe(
        {
            "name": "contracts",
            "benchmark": {"name": "tiny", "setting": setting, "limit": limit},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": systems,
            "judges": judges,
            "run": {"out_dir": str(tmp_path / "out"), "concurrency": 4},
        }
    )
    runner = Runner(recipe, tmp_path / "run", progress=False)
    asyncio.run(runner.run())
    assert runner.outcome is not None
    return runner.outcome, list(ResultsFile(runner.folder.results).load().values())


@pytest.mark.parametrize(
    "pipeline", ["no_response", "edited_response", "text_response", "parent_user_context", "parent_judgment"]
)
def test_a_conversation_holds_each_turns_response_to_the_pipeline_contract(tmp_path, pipeline):
    """In conversation with the simulated user, a turn's missing or malformed response fails the
    episode by the clause, as in a plain episode (it was a KeyError, an AttributeError, or a
    transcript reading 'Assistant: None' that was scored, exit 0); so does a turn that writes more
    than its response into the conversation's state through Command.PARENT (scored, exit 0)."""
    talk = {"name": "talk", "pipeline": f"{DOUBLES}:{pipeline}", "memory": {"backend": "full"}}
    outcome, records = run(tmp_path, [{**talk, "conversation": {"max_turns": 2}}], [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == EXIT_FAILURES and records
    assert all(not r.ok and pipeline_contract.RESPONSE.name in (r.error or "") for r in records)
    assert len(found(records, pipeline_contract.RESPONSE)) == len(records)


def found(records: list[ResultRecord], clause, system: str | None = None) -> list[str]:
    """The details of the degradations of `clause`'s kind naming the clause (in `system`'s episodes)."""
    return [
        d.detail
        for r in records
        if system is None or r.system == system
        for d in r.degraded
        if d.kind == clause.kind and clause.name in d.detail
    ]


# --------------------------------------------------------------------------- planted in a run, found by name

PLANTS = {
    "budget": (memory_contract.BUDGET, {"memory": {"backend": f"{DOUBLES}:OverBudgetMemory"}}),
    "known_ids": (memory_contract.KNOWN_IDS, {"memory": {"backend": f"{DOUBLES}:InventingMemory"}}),
    "persona": (memory_contract.PERSONA, {"memory": {"backend": f"{DOUBLES}:PersonaDroppingMemory"}}),
    "no_response": (pipeline_contract.RESPONSE, {"pipeline": f"{DOUBLES}:no_response"}),
    "text_response": (pipeline_contract.RESPONSE, {"pipeline": f"{DOUBLES}:text_response"}),
    "dict_response": (pipeline_contract.RESPONSE, {"pipeline": f"{DOUBLES}:dict_response"}),
    "edited_response": (pipeline_contract.RESPONSE, {"pipeline": f"{DOUBLES}:edited_response"}),
    "persona_cheat": (memory_contract.BUDGET, {"memory": {"backend": f"{DOUBLES}:PersonaCheatMemory"}}),
    "dict_context": (memory_contract.CONTEXT, {"memory": {"backend": f"{DOUBLES}:DictContextMemory"}}),
    "invented_citation": (pipeline_contract.CITATIONS, {"pipeline": f"{DOUBLES}:invented_citation"}),
    "unwritable_state": (pipeline_contract.CHECKPOINTS, {"pipeline": f"{DOUBLES}:unwritable_state"}),
}
JUDGE_PLANTS = {"off_scale": f"{DOUBLES}:OffScale", "not_finite": f"{DOUBLES}:NotFinite"}
SCALES = {"off_scale": "(scale 0-1): score 7.0 is outside", "not_finite": "(scale 1-5): score "}


# each example is a whole run: no shrinking (a failure names its plants, budget and limit as drawn)
@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(plants={"budget", "known_ids", "persona"}, judge="not_finite", budget=60, limit=2)  # every clause once
@example(plants={"no_response", "text_response", "dict_response"}, judge="off_scale", budget=60, limit=1)
@example(plants={"edited_response", "persona_cheat", "dict_context"}, judge=None, budget=60, limit=1)
@example(plants={"invented_citation", "unwritable_state"}, judge=None, budget=60, limit=1)
@given(
    plants=st.sets(st.sampled_from(sorted(PLANTS)), min_size=1, max_size=3),
    judge=st.sampled_from([None, *sorted(JUDGE_PLANTS)]),
    budget=st.integers(min_value=20, max_value=400),
    limit=st.integers(min_value=1, max_value=3),
)
def test_a_clause_planted_in_a_run_is_a_degradation_by_its_name_and_the_run_exits_3(
    tmp_path_factory, plants, judge, budget, limit
):
    tmp_path = tmp_path_factory.mktemp("planted")
    systems = [SOUND]
    for name in sorted(plants):
        system = {"name": name, "pipeline": "direct", "memory": {"backend": "full"}, **PLANTS[name][1]}
        if name == "budget":
            system["memory"] = {**system["memory"], "budget_tokens": budget}
        systems.append(system)
    judges = [{"name": "lampqa_aspects"}] + ([{"name": JUDGE_PLANTS[judge]}] if judge else [])
    outcome, records = run(tmp_path, systems, judges, setting="persona+context", limit=limit)

    assert outcome.exit_code == EXIT_FAILURES
    for name in plants:
        clause = PLANTS[name][0]
        mine = [r for r in records if r.system == name]
        assert len(found(records, clause, name)) >= len(mine), (name, [r.degraded for r in mine])
        if clause is not memory_contract.PERSONA:  # the persona's loss is recorded; the others fail the episode
            assert all(not r.ok and clause.name in (r.error or "") for r in mine)
            assert outcome.failing_degradations[clause.kind] >= len(mine)
    sound = [r for r in records if r.system == "sound"]
    assert all(r.ok for r in sound) and not any(r.contract for r in sound)
    assert all(d.kind not in {c.kind for c, _ in PLANTS.values()} for r in sound for d in r.degraded)
    if judge:
        scored = [r for r in records if r.ok]
        failed = [j for r in scored for j in r.judgments if j.judge == JUDGE_PLANTS[judge]]
        assert failed and all(j.failed and j.score is None for j in failed)
        assert all(judge_contract.SCALE.name in (j.error or "") and SCALES[judge] in (j.error or "") for j in failed)
        assert len(found(scored, judge_contract.SCALE)) == len(failed)
        assert all(r.scores[JUDGE_PLANTS[judge]] is None for r in scored)


def test_a_pipeline_graph_returning_more_than_its_response_is_refused_before_any_episode(tmp_path):
    """A graph compiled without an output schema returns its whole state: the context it made
    (another user's event) overwrote the one the memory gave, in results.jsonl, with exit 0. It is
    refused as the episode graph is built (exit 2), naming the pipeline and the key; a graph that
    returns only its response is not."""
    forging = {"name": "forging", "pipeline": f"{DOUBLES}:whole_state_output", "memory": {"backend": "full"}}
    with pytest.raises(pipeline_contract.PipelineOutputError) as raised:
        run(tmp_path, [SOUND, forging], [{"name": "lampqa_aspects"}])
    said = str(raised.value)
    assert f"{DOUBLES}:whole_state_output" in said and "'user_context'" in said and "output_schema" in said
    assert "'response'" not in said.split("beside")[0]
    from atelier.graphs.episode import EpisodeState
    from atelier.graphs.pipelines import PIPELINES

    for name in PIPELINES.names():  # every built-in returns only its response
        spec = PIPELINES.get(name)
        if spec.step is None:
            assert pipeline_contract.output_problem(spec.build(), name, EpisodeState.__annotations__) is None


@pytest.mark.parametrize(("double", "key"), [("parent_user_context", "user_context"), ("parent_judgment", "judgments")])
def test_a_pipeline_writing_the_episodes_state_through_command_parent_fails_its_episode_by_the_clause(
    tmp_path, double, key
):
    """A node of the pipeline's graph returning Command(graph=Command.PARENT, update=...) wrote
    straight into the episode's state, past its output schema: another user's context stood as the
    memory's, a judgment of its own was scored, exit 0. Each episode fails by 'the response schema',
    naming the pipeline and the key and saying what to return; the run exits 3."""
    planted = {"name": "planted", "pipeline": f"{DOUBLES}:{double}", "memory": {"backend": "full"}}
    outcome, records = run(tmp_path, [SOUND, planted], [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == EXIT_FAILURES
    mine = [r for r in records if r.system == "planted"]
    assert len(mine) == 2 and all(not r.ok and pipeline_contract.RESPONSE.name in (r.error or "") for r in mine)
    assert all(r.user_context is None and r.judgments == [] for r in mine)  # nothing forged was recorded
    details = found(records, pipeline_contract.RESPONSE, "planted")
    assert len(details) == len(mine) and outcome.failing_degradations[pipeline_contract.RESPONSE.kind] == len(mine)
    for detail in details:
        assert f"pipeline '{DOUBLES}:{double}'" in detail and f"'{key}'" in detail and "Command.PARENT" in detail
        assert "'response'" not in detail.split("through")[0] and '{"response": SystemResponse}' in detail
    sound = [r for r in records if r.system == "sound"]
    assert len(sound) == 2 and all(r.ok and not r.contract for r in sound)


@pytest.mark.parametrize(("double", "key"), [("step_user_context", "user_context"), ("step_judgment", "judgments")])
def test_a_one_step_pipelines_step_writing_the_episodes_state_fails_its_episode_by_the_clause(tmp_path, double, key):
    """A plugin's PipelineSpec with its own `step` runs as the episode's node, with no output schema
    between them: its update wrote the memory's context or a judgment straight into the episode."""
    planted = {"name": "planted", "pipeline": f"{DOUBLES}:{double}", "memory": {"backend": "full"}}
    outcome, records = run(tmp_path, [SOUND, planted], [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == EXIT_FAILURES
    mine = [r for r in records if r.system == "planted"]
    assert len(mine) == 2 and all(not r.ok and pipeline_contract.RESPONSE.name in (r.error or "") for r in mine)
    assert all(r.user_context is None and r.judgments == [] for r in mine)
    details = found(records, pipeline_contract.RESPONSE, "planted")
    assert len(details) == 2 and all(f"pipeline '{DOUBLES}:{double}' wrote '{key}'" in d for d in details)
    assert all("as its step's" in d and '{"response": SystemResponse}' in d for d in details)
    assert all(r.ok for r in records if r.system == "sound")


def test_a_one_step_pipelines_step_returning_its_response_is_given_its_runtime_and_scored(tmp_path):
    steps = {"name": "steps", "pipeline": f"{DOUBLES}:step_response", "memory": {"backend": "full"}}
    outcome, records = run(tmp_path, [steps], [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == 0 and len(records) == 2
    assert all(r.ok and r.response is not None and r.response.text == "an answer for steps" for r in records)
    assert all(r.judgments for r in records)


def test_a_conversation_refuses_a_pipeline_graph_returning_more_than_its_response(tmp_path):
    from atelier.graphs.contract import PipelineOutputError
    from atelier.graphs.pipelines import PIPELINES
    from atelier.graphs.simulate import build_conversation_graph

    name = f"{DOUBLES}:whole_state_output"
    PIPELINES.get(name)
    with pytest.raises(PipelineOutputError, match=r"returns .*'user_context'.* beside its response"):
        build_conversation_graph(name)


def test_a_pipeline_sending_only_its_response_through_command_parent_runs_and_resumes(tmp_path):
    """Command.PARENT carrying only `response` is the episode's own key, as a return gives it: the
    episode passes. And a run redone over threads that already hold their judgments (results lost:
    each episode invoked again on its thread) passes as the first did — the check looks at what the
    pipeline sends on this call, never at what the episode's state already holds."""
    from collections import Counter

    systems = [
        SOUND,
        {"name": "parent", "pipeline": f"{DOUBLES}:parent_response", "memory": {"backend": "full"}},
        {"name": "graph", "pipeline": f"{DOUBLES}:sound_graph", "memory": {"backend": "full"}},
    ]
    outcome, records = run(tmp_path, systems, [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == 0 and len(records) == 6 and all(r.ok and not r.contract for r in records)
    scores = {r.key: r.scores for r in records}
    results = tmp_path / "run" / "results.jsonl"
    kept = results.read_text().splitlines()[:2]
    results.write_text("\n".join(kept) + "\n" + kept[0][:40])  # two results and a torn line
    outcome, records = run(tmp_path, systems, [{"name": "lampqa_aspects"}])
    assert outcome.exit_code == 0 and all(r.ok and not r.contract for r in records)
    assert Counter(r.key for r in records) == Counter(set(scores)) and {r.key: r.scores for r in records} == scores


def test_a_graphs_input_no_checkpoint_can_hold_is_named_by_its_state_key(tmp_path):
    """A value no checkpoint can hold that reaches a graph as its input (a graph a pipeline's node
    invokes, the judges' given the episode's state) is checkpointed under LangGraph's input channel:
    the clause named `__start__`, holding a dict. It names the state key and the value's type."""
    planted = {"name": "planted", "pipeline": f"{DOUBLES}:unwritable_input", "memory": {"backend": "full"}}
    outcome, records = run(tmp_path, [planted], [{"name": "lampqa_aspects"}], limit=1)
    assert outcome.exit_code == EXIT_FAILURES and len(records) == 1 and not records[0].ok
    [detail] = found(records, pipeline_contract.CHECKPOINTS)
    assert "state key 'odd' of a graph's input holds a object" in detail and "__start__" not in detail


def test_a_citation_is_read_when_its_text_is_stored_or_its_url_was_fetched_or_found():
    from atelier.agents.response import Citation, SystemResponse

    response = SystemResponse(
        text="a [1] b [2] c [3]",
        citations=[
            Citation(source_id="a", url="https://a.example/", sha256="0" * 64, number=1),
            Citation(source_id="b", url="https://b.example/page", number=2),
            Citation(source_id="c", url=None, sha256="1" * 64, number=3),
        ],
    )
    stored, seen = {"0" * 64}.__contains__, {"https://b.example/page"}.__contains__
    assert pipeline_contract.unread_citations(response, stored, seen) == [
        "citation 'c' (no URL) is no page this run fetched or found and no text it read"
    ]
    assert pipeline_contract.unread_citations(response, lambda s: True, seen) == []
    with pytest.raises(pipeline_contract.ContractBroken) as raised:
        pipeline_contract.checked_citations(response, "p", "answer", stored, lambda url: False)
    assert raised.value.degradation.kind == "pipeline_unread_citation" and "'b'" in raised.value.detail


def test_a_results_file_holding_an_off_scale_or_nan_score_reads_as_failed_judgments(tmp_path, capsys, monkeypatch):
    run(tmp_path, [SOUND], [{"name": "lampqa_aspects"}])
    path = tmp_path / "run" / "results.jsonl"
    # as a results file written before runs held judges to their scale may hold them (JSON's NaN too)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line, score in zip(lines, [math.nan, 35.0]):
        line["judgments"][0]["score"] = line["scores"]["lampqa_aspects"] = score
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    loaded = ResultsFile(path).load()
    judgments = [j for r in loaded.values() for j in r.judgments]
    assert all(j.failed and judge_contract.SCALE.name in j.error for j in judgments)
    assert {j.error.split(": ")[-1] for j in judgments} == {
        "score nan is not a finite number",
        "score 35.0 is outside the declared scale 0-1",
    }
    code, _, err = atelier(capsys, monkeypatch, "report", str(tmp_path / "run"))
    assert code == EXIT_FAILURES and "Traceback" not in err
    assert "judge_off_scale" in err and "0 scored" in err


# --------------------------------------------------------------------------- the benchmark: every case source


def write_cases(path: Path, second_text: str, persona: bool = True) -> Path:
    def case(i: str, user: str, text: str) -> dict:
        return {
            "id": i,
            "benchmark": "mine",
            "user_id": user,
            "query": {"text": f"question {i}"},
            "history": [{"id": f"{user}:e1", "kind": "memory_snippet", "text": text}],
            **({"persona": {"user_id": user, "attributes": {"Basic": {"Job": f"job of {user}"}}}} if persona else {}),
        }

    rows = [case("m1", "maya", "I ride my bike to work."), case("m2", "maya", second_text), case("t1", "tomas", "x")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("setting", ["task_only", "persona+context"])
def test_a_recipes_setting_is_applied_to_a_file_of_cases_and_recorded_per_result(tmp_path, setting):
    cases = write_cases(tmp_path / "cases.jsonl", "I ride my bike to work.")
    recipe = parse_recipe(
        {
            "name": "file",
            "benchmark": {"name": "jsonl", "options": {"path": str(cases)}, "setting": setting},
            "models": {"system": {"model": "scripted"}},
            "systems": [SOUND],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    runner = Runner(recipe, tmp_path / "run", progress=False)
    asyncio.run(runner.run())
    records = list(ResultsFile(runner.folder.results).load().values())
    assert {r.setting for r in records} == {setting} and all(r.ok for r in records)
    for r in records:
        assert r.user_context is not None
        if setting == "task_only":
            assert r.user_context.event_ids == [] and r.user_context.text == ""
        else:
            assert r.user_context.event_ids[0] == f"{r.user_id}:persona"
            assert f"job of {r.user_id}" in r.user_context.text.splitlines()[0]


def test_a_plugin_loader_that_never_copies_the_setting_cannot_bypass_it():
    from atelier.benchmarks.registry import BENCHMARKS, LoadRequest, load_cases, plugin_benchmark

    def careless(request: LoadRequest) -> list[dict]:
        return [
            {"id": "c1", "benchmark": "x", "user_id": "u", "query": {"text": "q"},
             "history": [{"id": "u:e1", "kind": "memory_snippet", "text": "a note"}]}
        ]  # fmt: skip

    BENCHMARKS._references["tests.careless:loader"] = plugin_benchmark(careless, "tests.careless:loader")
    try:
        [case] = load_cases("tests.careless:loader", setting="task_only")
    finally:
        del BENCHMARKS._references["tests.careless:loader"]
    assert case.setting == "task_only" and case.view().history == []


def test_one_users_event_told_two_ways_is_refused_at_load_naming_both_cases_and_the_event(tmp_path):
    from atelier.benchmarks.registry import load_cases

    cases = write_cases(tmp_path / "cases.jsonl", "I drive a car to work.")
    with pytest.raises(DataError) as refused:
        load_cases("jsonl", options={"path": str(cases)})
    text = str(refused.value)
    assert benchmark_contract.USER_EVENTS.name in text and str(cases) in text
    assert "'maya:e1'" in text and "case m1" in text and "case m2" in text and "I drive a car" in text


@pytest.mark.parametrize(
    ("second", "told"),
    [
        # the same first 60 characters: the message shows where they part
        (
            {"text": "I ride my bike to work on weekdays, rain or shine, except in August."},
            ("'…weekdays, rain or shine.'", "'…weekdays, rain or shine, except in August.'"),
        ),
        ({"timestamp": "2024-12-31"}, ("timestamp '2025-01-10'", "timestamp '2024-12-31'")),
        ({"kind": "ptkb"}, ("kind 'memory_snippet'", "kind 'ptkb'")),
    ],
)
def test_two_versions_of_an_event_that_read_alike_are_told_apart_where_they_differ(tmp_path, second, told):
    from atelier.benchmarks.registry import load_cases

    first = {"id": "maya:e1", "kind": "memory_snippet", "timestamp": "2025-01-10"}
    first["text"] = "I ride my bike to work on weekdays, rain or shine."
    rows = [
        {"id": f"m{i}", "benchmark": "mine", "user_id": "maya", "query": {"text": "q"}, "history": [event]}
        for i, event in enumerate([first, {**first, **second}], 1)
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as refused:
        load_cases("jsonl", options={"path": str(path)})
    assert f"is {told[0]} in case m1 but {told[1]} in case m2" in str(refused.value)


def test_a_history_event_taking_the_personas_id_is_refused_at_load_naming_the_case_and_the_id(tmp_path):
    from atelier.benchmarks.registry import load_cases

    row = {
        "id": "m1",
        "benchmark": "mine",
        "user_id": "maya",
        "query": {"text": "q"},
        "history": [{"id": "maya:persona", "kind": "memory_snippet", "text": "I eat only steak."}],
        "persona": {"user_id": "maya", "attributes": {"Basic": {"Diet": "vegetarian"}}},
    }
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as refused:
        load_cases("jsonl", options={"path": str(path)})
    text = str(refused.value)
    assert benchmark_contract.SCHEMA.name in text and "case m1: history event id 'maya:persona'" in text


def test_a_case_holding_another_users_persona_is_refused_at_load_naming_the_case_and_the_field(tmp_path):
    """ben's case with ana's persona gave ben's context `[ana:persona]`, exit 0."""
    from atelier.benchmarks.registry import load_cases

    row = {
        "id": "b1",
        "benchmark": "mine",
        "user_id": "ben",
        "query": {"text": "q"},
        "history": [{"id": "ben:m1", "kind": "memory_snippet", "text": "I cycle."}],
        "persona": {"user_id": "ana", "attributes": {"Basic": {"Diet": "vegetarian"}}},
    }
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as refused:
        load_cases("jsonl", options={"path": str(path)})
    assert "case b1: field persona.user_id is 'ana', not the case's user 'ben'" in str(refused.value)
    path.write_text(json.dumps({**row, "persona": {**row["persona"], "user_id": "ben"}}) + "\n")
    assert [c.persona.user_id for c in load_cases("jsonl", options={"path": str(path)})] == ["ben"]


def test_the_persona_alone_is_the_only_way_over_a_budget():
    """`full` in the `persona` setting with a persona over the budget records it (the exemption
    holds); a context claiming the exemption while its text holds more than the persona does not."""
    from atelier.benchmarks.case import ExplicitPersona
    from atelier.memory.base import MemoryConfig, MemoryEnv
    from atelier.memory.registry import create_backend

    persona = ExplicitPersona(id="u:persona", attributes={"Basic": {"Job": "night nurse", "Diet": "vegetarian"}})
    full = create_backend(MemoryConfig(backend="full", budget_tokens=5), MemoryEnv())
    asyncio.run(full.ingest("u", [persona]))
    context = asyncio.run(full.context("u", "q"))
    assert context.event_ids == ["u:persona"] and context.tokens > 5
    assert [d.kind for d in context.degraded] == ["memory_budget_cut"]
    held = memory_contract.held_to_contract(context, user_id="u", budget=5, known={"u:persona"}, persona=persona)
    assert held.text == context.text
    cheat = context.model_copy(update={"text": context.text + "\nI drive to work. I love steak."})
    with pytest.raises(memory_contract.ContractBroken) as broken:
        memory_contract.held_to_contract(cheat, user_id="u", budget=5, known={"u:persona"}, persona=persona)
    assert broken.value.clause is memory_contract.BUDGET


def test_a_persona_setting_on_cases_without_a_persona_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    cases = write_cases(tmp_path / "cases.jsonl", "I ride my bike to work.", persona=False)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'name = "p"\n[benchmark]\npath = "{cases}"\nsetting = "persona+context"\n[models.system]\nmodel = "scripted"\n'
        '[[systems]]\nname = "s"\npipeline = "direct"\nmemory = { backend = "full" }\n'
    )
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2 and benchmark_contract.SETTINGS.name in err and "have none" in err
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_view_that_does_not_show_what_its_setting_says_breaks_the_clause():
    from atelier.benchmarks.registry import load_cases

    case = load_cases("tiny", setting="persona+context")[0]
    assert benchmark_contract.view_problem(case, case.view("persona+context"), "persona+context") is None
    context_only = case.view("context").model_copy(update={"setting": "persona+context"})
    assert "shows no persona" in benchmark_contract.view_problem(case, context_only, "persona+context")
    leaky = case.view("context").model_copy(update={"setting": "task_only"})
    assert "task_only shows" in benchmark_contract.view_problem(case, leaky, "task_only")


# --------------------------------------------------------------------------- judges' scale


@pytest.mark.parametrize(
    ("score", "repeats", "problem"),
    [
        (3.0, None, None),
        (1.0, [1.0, 5.0], None),
        (None, None, None),  # undefined by the judge's protocol: not off the scale
        (35.0, None, "score 35.0 is outside"),
        (-1.0, None, "score -1.0 is outside"),
        (math.nan, None, "score nan is not a finite number"),
        (math.inf, None, "score inf is not a finite number"),
        (3.0, [35.0, -29.0], "repeat 1 score 35.0 is outside"),  # a mean inside, repeats outside
    ],
)
def test_a_score_off_the_declared_scale_or_not_finite_fails_the_judgment_naming_both(score, repeats, problem):
    result = JudgeResult(judge="j", score=score, scale="1-5", details={"repeat_scores": repeats} if repeats else {})
    held = judge_contract.held_to_scale(result, "1-5", "judge:j")
    if problem is None:
        assert held is result
        return
    assert held.failed and held.score is None and problem in held.error and "(scale 1-5)" in held.error
    assert [d.kind for d in held.degraded] == ["judge_off_scale"]


def test_a_judge_declaring_a_scale_that_is_no_range_is_refused_before_any_episode():
    from atelier.agents.judges.base import check_judge_fit
    from atelier.benchmarks.common.errors import ConfigError
    from tests.conformance_doubles import OffScale

    judge = OffScale(OffScale.config_model(name="off_scale"))
    judge.scale = "good-bad"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="declares scale 'good-bad', not 'low-high'"):
        check_judge_fit([judge], [], "tiny")


# --------------------------------------------------------------------------- provider answers

KINDS = {"perplexity": "perplexity/sonar-deep-research", "responses": "openai/o3-deep-research"}


def grounded(stub: ResearchApiStub, behaviour: str, stream: bool, cache: ResponseCache, question: str):
    settings = ModelSettings(model=KINDS[stub.kind], api_base=stub.base_url, api_key="sk-stub", max_retries=0)
    gateway = Gateway({"researcher": settings}, cache=cache)
    stub._script.clear()  # what an earlier test queued and a cache hit never asked for
    stub.script([behaviour])
    grounding = Grounding(api="chat" if stub.kind == "perplexity" else "responses", stream=stream)

    async def ask():
        with recording_answers() as broken:
            try:
                answer = await gateway.grounded("researcher", [{"role": "user", "content": question}], grounding)
            except ModelCallError as exc:
                return exc, broken
            return answer, broken

    return asyncio.run(ask())


@pytest.fixture(scope="module")
def stubs():
    cited = [("https://a.example/x", "A")]
    with ResearchApiStub("perplexity", cited) as p, ResearchApiStub("responses", cited, polls=0) as r:
        yield {"perplexity": p, "responses": r}


@pytest.mark.parametrize(
    ("kind", "behaviour", "stream", "clauses", "fails"),
    [
        ("perplexity", "length", False, [answer_contract.NOT_CUT], False),
        ("perplexity", "length", True, [answer_contract.NOT_CUT], False),
        ("perplexity", "content_filter", True, [answer_contract.NOT_FILTERED], False),
        ("perplexity", "unclosed", False, [answer_contract.NOT_CUT, answer_contract.REASONING_CLOSED], False),
        ("perplexity", "unclosed", True, [answer_contract.NOT_CUT, answer_contract.REASONING_CLOSED], False),
        ("responses", "incomplete", False, [answer_contract.NOT_CUT], False),
        ("responses", "incomplete", True, [answer_contract.NOT_CUT], False),
        ("perplexity", "cut:300", True, [answer_contract.WHOLE], True),
        ("perplexity", "emptychoices", False, [answer_contract.WHOLE], True),  # HTTP 200 with `"choices": []`
        # a foreground Responses stream cut after response.created: never retrieved, never cached
        ("responses", "cut:1500", True, [answer_contract.WHOLE], True),
        ("responses", "cut:4000", True, [answer_contract.WHOLE], True),
    ],
)
def test_a_provider_answer_that_is_not_whole_is_recorded_by_its_clause(
    stubs, tmp_path, kind, behaviour, stream, clauses, fails
):
    cache = ResponseCache(tmp_path / "cache")
    answer, broken = grounded(stubs[kind], behaviour, stream, cache, f"{behaviour} {stream}")
    assert [d.kind for d in broken] == [c.kind for c in clauses]
    assert all(c.name in d.detail for c, d in zip(clauses, broken))
    if fails:  # a stream cut off: retried as a lost connection would be (none left here), never cached
        assert isinstance(answer, ModelCallError) and answer.verdict == "retry" and answer.attempts == 1
        assert len(cache) == 0
        return
    assert not isinstance(answer, ModelCallError)
    if answer_contract.REASONING_CLOSED in clauses:
        assert answer.text == ""  # the partial reasoning is not the answer
    # cached with what it broke: a rerun replays the answer and records the same
    again, replayed = grounded(stubs[kind], "ok", stream, cache, f"{behaviour} {stream}")
    assert again.text == answer.text and [d.kind for d in replayed] == [c.kind for c in clauses]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(KINDS)), share=st.floats(min_value=0.0, max_value=1.0))
def test_a_stream_cut_at_any_byte_is_never_cached_as_a_complete_answer(stubs, tmp_path_factory, kind, share):
    stub = stubs[kind]
    question = f"cut {kind}"
    whole_answer = stub.perplexity({"messages": [{"content": question}]}) if kind == "perplexity" else None
    whole = stream_bytes(kind, whole_answer or stub.response({"input": [{"content": question}]}))
    offset = min(int(share * whole), whole - 1)  # strictly before the stream's last byte
    cache = ResponseCache(tmp_path_factory.mktemp("cache"))
    answer, broken = grounded(stub, f"cut:{offset}", True, cache, question)
    if isinstance(answer, ModelCallError):
        assert answer.verdict == "retry" and answer_contract.WHOLE.name in str(answer)
        assert [d.kind for d in broken] == ["answer_incomplete"]
        assert len(cache) == 0
        return
    # what arrived held its terminal event (only the stream's closing bytes were cut)
    reference, _ = grounded(stub, "ok", True, ResponseCache(tmp_path_factory.mktemp("cache")), question)
    assert answer.text == reference.text and broken == [] and len(cache) == 1
    # (a foreground Responses stream is never retrieved: cut before its last byte, it is never whole)
    assert kind == "perplexity"


def test_a_systems_cut_answer_is_recorded_in_its_episode_and_a_judges_in_its_judgment(tmp_path):
    from tests.openai_stub import OpenAIStub

    with OpenAIStub() as stub:
        stub.script(["cut"])  # the system's one text call: finish_reason length
        system = {"model": "openai/stub-model", "api_base": stub.base_url, "api_key": "sk-stub", "max_retries": 0}
        recipe = parse_recipe(
            {
                "name": "cut",
                "benchmark": {"name": "tiny", "limit": 1},
                "models": {"system": system, "judge": {"model": "scripted"}, "user_sim": {"model": "scripted"}},
                "systems": [{"name": "direct", "pipeline": "direct", "memory": {"backend": "none"}}],
                "judges": [{"name": "lampqa_aspects"}],
                "run": {"out_dir": str(tmp_path / "out")},
            }
        )
        runner = Runner(recipe, tmp_path / "run", progress=False, preflight=False)
        asyncio.run(runner.run())
    [record] = ResultsFile(runner.folder.results).load().values()
    assert record.ok and [d.kind for d in record.contract] == ["answer_cut"]
    assert record.contract[0].step == "direct" and answer_contract.NOT_CUT.name in record.contract[0].detail
    assert runner.outcome is not None and runner.outcome.failing_degradations == {"answer_cut": 1}
    assert all(not j.degraded for j in record.judgments)

    async def judged_while_an_episode_records():
        judge = create_judge({"name": "lampqa_aspects"})

        async def judgment():
            answer_contract.note([answer_contract.NOT_CUT.broken("the judge's answer", "run_judge")])
            return JudgeResult(judge="lampqa_aspects", score=0.5)

        with recording_answers() as episode:
            result = await judge_contract.held_to_contract(judge, judgment())
        return result, episode

    result, episode = asyncio.run(judged_while_an_episode_records())
    assert [d.kind for d in result.degraded] == ["answer_cut"] and episode == []  # the judgment keeps its own


# --------------------------------------------------------------------------- memory: a state that rebuilds


async def test_a_rebuild_mismatch_from_a_clock_read_outside_now_names_it_and_the_kit(tmp_path):
    import time

    from atelier.memory.base import MemoryConfig, MemoryEnv, digest_of
    from atelier.memory.journal import MemoryRebuildError, journaled
    from tests.conformance_doubles import SoundMemory

    class Stamped(SoundMemory):
        """Stamps what it holds with time.time(), not self.now(): its state is not what it was fed."""

        name = "stamped"
        config_model = MemoryConfig

        async def ingest(self, user_id, events):
            await super().ingest(user_id, events)
            self.stamp = time.time()

        async def state_digest(self, user_id):
            return digest_of([self.events(user_id), self.stamp])

    from atelier.benchmarks.case import MemorySnippet

    events = [MemorySnippet(id="u:m1", text="I bike to work.")]
    first = journaled(Stamped(MemoryConfig(backend="stamped"), MemoryEnv(store_dir=tmp_path)))
    await first.ingest("u", events)
    await first.aclose()
    later = journaled(Stamped(MemoryConfig(backend="stamped"), MemoryEnv(store_dir=tmp_path)))
    with pytest.raises(MemoryRebuildError) as refused:
        await later.context("u", "anything")
    text = str(refused.value)
    assert "not deterministic" in text and "time.time()" in text and "`self.now()`" in text
    assert "atelier check memory stamped" in text and "not answered by the response cache" not in text
    await later.aclose()


def test_a_run_resumed_on_cases_changed_since_it_began_is_refused_naming_the_case(tmp_path, cache_dir):
    """The cases file edited between two processes of one run: ben's event now said the opposite,
    yet the resumed episode's context quoted the old text (from the memory journal), exit 0."""
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.execution.runner import run_recipe

    rows = [
        {
            "id": f"{user}-1",
            "benchmark": "mine",
            "user_id": user,
            "query": {"text": "What should I read next?"},
            "history": [{"id": f"{user}:m1", "kind": "memory_snippet", "text": f"{user} likes numbers."}],
        }
        for user in ("ana", "ben")
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = parse_recipe(
        {
            "name": "changed",
            "benchmark": {"path": str(path), "setting": "context"},
            "systems": [{"name": "full", "memory": {"backend": "full"}}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    assert run_recipe(recipe, folder.path, progress=False).path == folder.path  # the same cases: resumes
    rows[1]["history"][0]["text"] = "ben hates numbers."
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"holds a run of other cases: case ben-1 changed since the run began"):
        run_recipe(recipe, folder.path, progress=False)


async def test_a_memory_journal_refuses_an_event_told_otherwise_than_it_ingested_it(tmp_path):
    from atelier.benchmarks.case import MemorySnippet
    from atelier.memory.base import MemoryEnv
    from atelier.memory.journal import MemoryRebuildError, journaled
    from atelier.memory.registry import create_backend

    def opened():
        return journaled(create_backend({"backend": "full"}, MemoryEnv(store_dir=tmp_path)))

    first = opened()
    await first.ingest("ben", [MemorySnippet(id="ben:m1", text="I like detailed explanations with numbers.")])
    await first.aclose()
    again = opened()  # a later process of the run
    await again.ingest("ben", [MemorySnippet(id="ben:m1", text="I like detailed explanations with numbers.")])
    with pytest.raises(MemoryRebuildError) as refused:
        await again.ingest("ben", [MemorySnippet(id="ben:m1", text="I hate numbers entirely.")])
    said = str(refused.value)
    assert "the event 'ben:m1' of user 'ben' is" in said and "'I hate numbers entirely.'" in said and ":2" in said
    await again.aclose()


async def test_a_page_the_web_was_asked_for_stays_citable_when_it_could_not_be_read(tmp_path):
    """research_api's cited link that failed to resolve (fetch_failed, the citation kept as the docs
    say) failed the whole episode as an unread citation: a URL the web was asked to fetch counts,
    whatever came of it; one never asked or found does not."""
    from atelier.tools.config import WebConfig
    from atelier.tools.errors import WebError
    from atelier.tools.web import build_web

    async with build_web(WebConfig(cache_dir=tmp_path / "web")) as web:
        with pytest.raises(WebError):
            await web.fetch("https://nowhere.invalid/page")
        assert web.saw("https://nowhere.invalid/page") and not web.saw("https://elsewhere.invalid/page")


def test_a_citation_whose_reading_the_response_records_as_failed_is_not_unread():
    """A resumed episode's web may not have been asked in this process: the response's own
    fetch_failed naming the URL says it was."""
    from atelier.agents.response import Citation, SystemResponse
    from atelier.benchmarks.common.degradation import degradation

    cited = Citation(source_id="w", url="https://dead.example/x", number=1)
    response = SystemResponse(text="x [1]", citations=[cited])
    nothing = lambda _: False
    assert pipeline_contract.unread_citations(response, nothing, nothing)
    failed = response.model_copy(
        update={"degraded": [degradation("fetch_failed", "read", "https://dead.example/x: DNS failure")]}
    )
    assert pipeline_contract.unread_citations(failed, nothing, nothing) == []


def test_a_memory_whose_async_methods_a_decorator_wraps_is_not_refused():
    """An `async def` under a decorator that keeps it (`functools.wraps`) is awaited as any: it was
    refused at load as a plain `def`; one that is a plain `def` still is."""
    import functools

    from atelier.memory.registry import not_async
    from tests.conformance_doubles import SoundMemory

    def logged(method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            return method(*args, **kwargs)  # the coroutine, awaited by the caller

        return wrapper

    class Logged(SoundMemory):
        context = logged(SoundMemory.context)

    class Plain(SoundMemory):
        def context(self, *args, **kwargs):  # type: ignore[override]
            return None

    assert not_async(Logged) == [] and not_async(Plain) == ["context"]


async def test_a_retrieval_store_refuses_an_event_told_otherwise_than_it_stored_it(tmp_path):
    """The retrieval backend reopens its own store rather than a journal: a case renamed and its event
    edited between two processes got past the run's case digests, and the resumed episode was answered
    from the old event."""
    from atelier.benchmarks.case import MemorySnippet
    from atelier.benchmarks.common.errors import DataError
    from atelier.memory.base import MemoryEnv
    from atelier.memory.registry import create_backend

    def opened():
        return create_backend({"backend": "retrieval", "method": "bm25"}, MemoryEnv(store_dir=tmp_path))

    first = opened()
    await first.ingest(
        "ben", [MemorySnippet(id="ben:m0", text="I cycle."), MemorySnippet(id="ben:m1", text="I like numbers.")]
    )
    await first.aclose()
    again = opened()  # a later process of the run
    await again.ingest("ben", [MemorySnippet(id="ben:m1", text="I like numbers.")])  # the same: no error
    with pytest.raises(DataError) as refused:
        await again.ingest("ben", [MemorySnippet(id="ben:m1", text="I hate numbers entirely.")])
    said = str(refused.value)
    assert "the event 'ben:m1' of user 'ben' is 'I hate numbers entirely.'" in said
    assert "stored it as 'I like numbers.'" in said and ".jsonl:2" in said
    context = await again.context("ben", "numbers")
    assert "I like numbers." in context.text and "hate" not in context.text  # nothing of the refused ingest stored
    await again.aclose()


def test_a_run_resumed_on_a_renamed_and_edited_case_is_refused_by_the_retrieval_store(tmp_path, cache_dir):
    from atelier.runs.execution.runner import run_recipe

    rows = [
        {
            "id": "ben-1",
            "benchmark": "mine",
            "user_id": "ben",
            "query": {"text": "What should I read next?"},
            "history": [{"id": "ben:m1", "kind": "memory_snippet", "text": "ben likes numbers."}],
        }
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n")
    recipe = parse_recipe(
        {
            "name": "renamed",
            "benchmark": {"path": str(path), "setting": "context"},
            "systems": [{"name": "bm25", "memory": {"backend": "retrieval", "method": "bm25"}}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    rows[0] |= {"id": "ben-2"}
    rows[0]["history"][0]["text"] = "ben hates numbers."
    path.write_text(json.dumps(rows[0]) + "\n")
    run_recipe(recipe, folder.path, progress=False)
    results = [json.loads(line) for line in (folder.path / "results.jsonl").read_text().splitlines()]
    [ben2] = [r for r in results if r["case_id"] == "ben-2"]
    assert ben2["status"] == "error" and ben2["response"] is None  # not answered from "ben likes numbers."
    assert "the event 'ben:m1' of user 'ben' is 'ben hates numbers.'" in ben2["error"]
    assert "stored it as 'ben likes numbers.'" in ben2["error"] and "/retrieval/events/" in ben2["error"]
