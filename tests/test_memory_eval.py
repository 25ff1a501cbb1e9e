"""History-retrieval evaluation: exact metrics on a hand-made ranking, query modes, `atelier memory eval`
on iKAT, `--param` errors, and `atelier bench memory` on a small history."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import typer
from typer.testing import CliRunner

from atelier.benchmarks.case import Case, ConversationTurn, Gold, HistoryEvent, MemorySnippet, Query
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryQuery, UserContext, as_query, memory_query
from atelier.memory.evaluation import evaluate_retrieval, gold_qrels, user_histories
from atelier.runs.bench.memory import synthetic_histories, synthetic_queries
from atelier.runs.cli import memory as memory_cli
from atelier.runs.cli.memory import backend_config, parse_assignments


class FixedRanking(MemoryBackend):
    """Returns the ids in a fixed order per query text; records what it was given."""

    name = "fixed"
    config_model = MemoryConfig

    def __init__(self, rankings: dict[str, list[str]]) -> None:
        super().__init__(MemoryConfig(backend="fixed"))
        self.rankings = rankings
        self.ingested: dict[str, list[str]] = {}
        self.queries: list[MemoryQuery] = []

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        self.ingested.setdefault(user_id, []).extend(e.id for e in events)

    async def context(self, user_id, query, budget=None) -> UserContext:
        query = as_query(query)
        self.queries.append(query)
        return UserContext(backend=self.name, form="raw", event_ids=self.rankings[query.text])


def case(case_id: str, user: str, text: str, gold: Gold, turns=()) -> Case:
    events = [MemorySnippet(id=f"e{i}", text=f"note {i}") for i in range(1, 5)]
    return Case(
        id=case_id,
        benchmark="t",
        user_id=user,
        query=Query(
            text=text,
            resolved=f"{text} (resolved)",
            previous_turns=[ConversationTurn(utterance=u, response=r) for u, r in turns],
        ),
        history=events,
        gold=gold,
    )


async def test_scores_are_trec_eval_means_over_judged_cases():
    cases = [
        case("c1", "u1", "q1", Gold(relevant_history_ids=["e2"])),
        case("c2", "u1", "q2", Gold(relevance={"e1": 2, "e3": 1, "e4": 0})),
        case("c3", "u2", "q3", Gold()),  # no gold: skipped
    ]
    backend = FixedRanking({"q1": ["e1", "e2", "e3"], "q2": ["e3", "e1"]})
    result = await evaluate_retrieval(backend, cases)
    assert (result.n, result.skipped_without_gold, result.users, result.history_events) == (2, 1, 2, 8)
    assert backend.ingested == {"u1": ["e1", "e2", "e3", "e4"], "u2": ["e1", "e2", "e3", "e4"]}  # once per user
    ndcg_q1 = (1 / 1.5849625007211562) / 1.0
    ndcg_q2 = (1 / 1 + 2 / 1.5849625007211562) / (2 / 1 + 1 / 1.5849625007211562)
    assert result.ndcg_3 == pytest.approx((ndcg_q1 + ndcg_q2) / 2)
    assert result.p_3 == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert result.r_3 == pytest.approx(1.0)
    assert result.mrr == pytest.approx((1 / 2 + 1) / 2)
    assert 0 <= result.latency_ms_p50 <= result.latency_ms_p95
    summary = result.summary()
    assert {"nDCG@3", "nDCG@10", "P@3", "R@3", "MRR", "n", "latency_ms_p50", "latency_ms_p95"} <= set(summary)
    assert "per_query" not in summary


async def test_no_gold_is_not_measured_never_zero():
    backend = FixedRanking({})
    result = await evaluate_retrieval(
        backend, [case("c1", "u1", "q1", Gold()), case("c2", "u1", "q2", Gold(relevance={"e1": 0}))]
    )
    assert (result.n, result.skipped_without_gold) == (0, 2)
    assert result.not_measured == "not measured: no case has gold relevant history"
    summary = result.summary()
    for key in ("nDCG@3", "nDCG@10", "P@3", "R@3", "MRR", "latency_ms_p50", "latency_ms_p95"):
        assert summary[key] is None, key
    assert backend.queries == []  # nothing recalled
    measured = await evaluate_retrieval(
        FixedRanking({"q1": ["e1"]}), [case("c1", "u1", "q1", Gold(relevant_history_ids=["e1"]))]
    )
    assert measured.not_measured is None and measured.ndcg_10 == 1.0


def test_memory_eval_without_gold_prints_null_and_exits_as_bad_input(cli, monkeypatch):
    from atelier.benchmarks import registry as registry_module

    no_gold = [case(f"c{i}", "u1", f"q{i}", Gold()) for i in range(3)]
    monkeypatch.setattr(registry_module, "load_cases", lambda *args, **kwargs: no_gold)
    result = CliRunner().invoke(cli, ["memory", "eval", "--benchmark", "sample", "--split", "all", "--backend", "none"])
    assert isinstance(result.exception, ConfigError)  # the CLI's main turns it into one line and exit 2
    assert str(result.exception) == (
        "--benchmark sample (split all): not measured: no case has gold relevant history "
        "(3 cases; memory eval scores cases with Gold.relevant_history_ids or Gold.relevance)"
    )
    printed = json.loads(result.stdout)
    assert {key: printed[key] for key in ("nDCG@3", "nDCG@10", "P@3", "R@3", "MRR", "n")} == {
        "nDCG@3": None,
        "nDCG@10": None,
        "P@3": None,
        "R@3": None,
        "MRR": None,
        "n": 0,
    }
    assert printed["not_measured"] == "not measured: no case has gold relevant history"
    assert (printed["skipped_without_gold"], printed["cases_with_gold"]) == (3, 0)


def test_memory_eval_on_a_benchmark_without_gold_exits_2(tmp_path):
    """PDR-Bench ships no relevant history ids: the whole command, as a user runs it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "memory", "eval", "--benchmark", "pdr", "--backend", "none"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --benchmark pdr (split all): not measured: no case has gold relevant history (250 cases; memory eval "
        "scores cases with Gold.relevant_history_ids or Gold.relevance)"
    ]
    printed = json.loads(done.stdout)
    assert (printed["nDCG@10"], printed["n"], printed["skipped_without_gold"]) == (None, 0, 250)


def test_query_modes():
    c = case("c", "u", "And the second?", Gold(), turns=[("Cheap cars?", "A Dacia or a Kia.")])
    view = c.view()
    assert memory_query(view, "raw") == MemoryQuery(text="And the second?")
    assert memory_query(view, "resolved").text == "And the second? (resolved)"
    query = memory_query(view, "context")
    assert query.turn_texts() == ["Cheap cars?"]
    assert query.turn_texts(responses=True) == ["Cheap cars?\nA Dacia or a Kia."]
    assert gold_qrels(Gold(relevant_history_ids=["a"], relevance={"b": 2})) == {"b": 2}
    assert list(user_histories([view, view])) == ["u"]


@pytest.fixture
def cli() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    memory_cli.register(app, bench)
    app.add_typer(bench, name="bench")
    return app


def test_memory_eval_on_ikat_prints_the_metrics(cli):
    args = [
        "memory",
        "eval",
        "--benchmark",
        "ikat",
        "--split",
        "2023_test",
        "--option",
        "qrels=nist",
        "--backend",
        "retrieval",
        "--param",
        "method=bm25",
        "--param",
        "conversation.turns=2",
        "--query",
        "context",
        "--limit",
        "60",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    every = load_cases("ikat", "2023_test", options={"qrels": "nist"})
    judged = [c for c in every if c.gold.relevant_history_ids]
    assert len(judged) > 60 and printed["n"] == 60  # the limit counts cases that can be scored
    assert printed["cases_with_gold"] == len(judged)
    assert printed["skipped_without_gold"] == len(every) - len(judged)
    for key in ("nDCG@3", "nDCG@10", "P@3", "R@3", "MRR"):
        assert 0.0 <= printed[key] <= 1.0
    assert printed["nDCG@3"] > 0  # BM25 finds some judged statements
    assert printed["backend"]["method"] == "bm25" and printed["backend"]["conversation"]["turns"] == 2
    assert printed["llm"]["calls"] == 0 and printed["llm"]["dry_run"] is False
    assert printed["latency_ms_p95"] >= printed["latency_ms_p50"] > 0


def test_memory_eval_labels_llm_backends_on_scripted_as_dry_runs(cli, tmp_path):
    per_query = tmp_path / "rows.jsonl"
    args = [
        "memory",
        "eval",
        "--benchmark",
        "ikat",
        "--split",
        "2023_train",
        "--backend",
        "retrieval",
        "--param",
        "method=bm25",
        "--param",
        "expansion=cot",
        "--limit",
        "10",
        "--per-query",
        str(per_query),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["n"] == 10  # --limit 10 scores 10 cases, not the gold-bearing few among the first 10
    assert printed["llm"]["calls"] == printed["n"] and printed["llm"]["dry_run"] is True
    rows = [json.loads(line) for line in per_query.read_text().splitlines()]
    assert len(rows) == printed["n"] and all(set(r["ranking"]) <= {f"ptkb:{i}" for i in range(1, 40)} for r in rows)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            ["methd=bm25"],
            "--param methd: Extra inputs are not permitted (backend 'retrieval' fields: budget_tokens, method",
        ),
        (["method=tfidf"], "--param method: Input should be 'bm25', 'dense' or 'hybrid'"),
        (["k=ten"], "--param k: Input should be a valid integer"),
        (
            ["conversation.turn=2"],
            "--param conversation.turn: Extra inputs are not permitted (backend 'retrieval' fields: turns, responses, mode",
        ),
        (["k"], "--param 'k' is not key=value"),
    ],
)
def test_bad_params_name_the_key_and_the_valid_fields(params, message):
    with pytest.raises(ConfigError) as caught:
        backend_config("retrieval", params)
    assert message in str(caught.value)


def test_params_are_parsed_as_json_when_they_parse():
    assert parse_assignments(["k=5", "form=raw", "conversation.weight=0.25", "x.y.z=true"], "--param") == {
        "k": 5,
        "form": "raw",
        "conversation": {"weight": 0.25},
        "x": {"y": {"z": True}},
    }
    config = backend_config("retrieval", ["k=5", "conversation.turns=3"])
    assert (config.k, config.conversation.turns) == (5, 3)


def test_memory_eval_rejects_an_unknown_query_mode(cli):
    result = CliRunner().invoke(cli, ["memory", "eval", "--benchmark", "ikat", "--backend", "none", "--query", "magic"])
    assert isinstance(result.exception, ConfigError) and "raw, resolved, context" in str(result.exception)


def test_bench_memory_reports_throughput_latency_and_memory(cli):
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "memory",
            "--backend",
            "retrieval",
            "--items",
            "300",
            "--queries",
            "50",
            "--events-per-user",
            "100",
            "--param",
            "method=bm25",
        ],
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert (printed["items"], printed["users"], printed["queries"]) == (300, 3, 50)
    assert printed["distinct_queries"] == 50
    assert printed["ingest_items_per_s"] > 0
    assert 0 < printed["recall_ms_p50"] <= printed["recall_ms_p95"] <= printed["recall_ms_max"]
    assert printed["peak_rss_mb"] > 0
    machine = printed["machine"]
    assert machine["cores"] >= 1 and machine["cpu"]
    assert set(machine["isa"]) <= {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni"}


def test_synthetic_history_is_seeded_and_spread_over_users():
    histories = synthetic_histories(1001, 500, seed=3)
    assert [len(v) for v in histories.values()] == [334, 334, 333]
    assert histories == synthetic_histories(1001, 500, seed=3)
    ids = [e.id for events in histories.values() for e in events]
    assert len(set(ids)) == 1001
    queries = synthetic_queries(list(histories), 20, seed=3)
    assert {user for user, _ in queries} <= set(histories)


@pytest.mark.parametrize(
    ("double", "clause"),
    [
        ("OverBudgetMemory", "'budget respected' broken: case "),
        ("InventingMemory", "'event ids only from ingested events' broken: case "),
        ("DictContextMemory", "'contexts in the UserContext schema' broken"),
    ],
)
def test_memory_eval_holds_each_ranking_to_the_memory_contract(cli, double, clause):
    """A ranking over its budget, or naming events the user never had, was scored as any other
    (exit 0, outside audit): the evaluation refuses it as a run does, naming the clause and the case."""
    from atelier.benchmarks.common.contract import ContractBroken

    args = ["memory", "eval", "--benchmark", "sample", "--limit", "2", "--budget", "60"]
    result = CliRunner().invoke(cli, [*args, "--backend", f"tests.conformance_doubles:{double}"])
    assert isinstance(result.exception, ContractBroken)  # the CLI's main turns it into one line and exit 2
    assert f"memory contract, {clause}" in str(result.exception)


def test_memory_eval_refuses_a_setting_that_shows_no_history_rather_than_scoring_zero(cli):
    """`--setting task_only` scored nDCG 0.0 over 4 cases (third outside audit): no history was given
    to rank. It is refused before anything is built, naming the setting."""
    args = ["memory", "eval", "--benchmark", "sample", "--limit", "4", "--backend", "full"]
    refused = CliRunner().invoke(cli, [*args, "--setting", "task_only"])
    assert isinstance(refused.exception, ConfigError)
    assert "--setting task_only: its views give the memory no history" in str(refused.exception)
    assert CliRunner().invoke(cli, [*args, "--setting", "context"]).exit_code == 0
