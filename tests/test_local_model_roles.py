"""The judges and the simulated user on the real local model (SmolLM2-135M), once each, on one case.

tests/test_local_model.py runs the pipelines and the LaMP-QA aspect judge on it; this module covers
the other roles: the PQR, BESPOKE, AEPD, LoCoMo and PrefEval judges, pairwise LaMP-QA, and the
simulated user answering clarifying questions, holding a conversation and writing a history. A
135M model judges poorly, so these assert the protocol, not quality: each judgment is scored or
failed with a named reason, each call is in the ledger with its role and node, structured answers
are grammar-constrained (`json_schema`), and the server's token counts stay within `max_tokens`.
One local server serves the whole module. Skipped like tests/test_local_model.py (required when
ATELIER_REQUIRE_LOCAL_MODEL=1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atelier.agents.clarify import DONT_KNOW, ClarifyRequest
from atelier.agents.judges.base import JudgeResult
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger, call_tags
from atelier.agents.models.local_model import SERVERS, parse_local_model
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim import (
    HistoryOptions,
    answer_clarification,
    check_protocol,
    check_reversibility,
    synthesize_history,
)
from atelier.agents.user_sim.history import history_rules
from atelier.benchmarks.loaders.pdr import context_history
from atelier.benchmarks.registry import load_cases
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.test_local_model import INSTALLED, lines, local_model_installed  # noqa: F401 (the skip-or-fail fixture)

MODEL = "local/smollm2"
SHORT = 32  # the systems' answers: judged, not read
JUDGE_TOKENS = 384  # room for a judge's JSON (analysis strings and scores) to close
HISTORY_TOKENS = 640  # five history items in one answer
pytestmark = [pytest.mark.slow, pytest.mark.battery]  # each test waits on the real model (minutes)


@pytest.fixture(scope="module", autouse=True)
def one_server():
    """The module's runs and gateways share one server (SERVERS counts its users)."""
    if not INSTALLED:  # the function-scoped fixture skips (or fails) each test
        yield
        return
    spec = parse_local_model(MODEL)
    SERVERS.acquire(spec)
    yield
    SERVERS.release(spec)
    assert not SERVERS.running()


def run(tmp_path: Path, benchmark: dict, systems: list[dict], judges: list[dict]) -> Path:
    models = {
        "system": {"model": MODEL, "max_tokens": SHORT},
        "judge": {"model": MODEL, "max_tokens": JUDGE_TOKENS},
        "user_sim": {"model": MODEL, "max_tokens": JUDGE_TOKENS},
    }
    recipe = parse_recipe(
        {
            "name": "local-roles",
            "benchmark": {**benchmark, "limit": 1},
            "models": models,
            "systems": systems,
            "judges": judges,
            "run": {"out_dir": str(tmp_path), "concurrency": 2},
        }
    )
    return run_recipe(recipe, tmp_path / "run", progress=False).path


def check_protocol_of_run(folder: Path, judges: list[str], roles: set[str]) -> tuple[list[dict], list[dict]]:
    """Every episode answered; every judgment of `judges` either scored within its scale or failed with a
    reason naming the judge's model or what it lacked; every call of `roles` in the ledger, tagged
    with its node, structured ones grammar-constrained. Returns (judgments, ledger)."""
    results = lines(folder / "results.jsonl")
    assert results and all(r["status"] == "ok" and not r["dry_run"] for r in results), [r.get("error") for r in results]
    judgments = [j for r in results for j in r["judgments"] if j["judge"] in judges]
    assert {j["judge"] for j in judgments} == set(judges)
    for judgment in judgments:
        JudgeResult.model_validate(judgment)
        if judgment["error"] is None:
            low, high = (float(x) for x in judgment["scale"].split("-"))
            assert low <= judgment["score"] <= high, judgment
        else:  # a weak model's failure is fine; an unnamed one is not
            assert judgment["score"] is None and "smollm2" in judgment["error"], judgment["error"]
    ledger = lines(folder / "ledger.jsonl")
    assert roles <= {e["role"] for e in ledger}
    assert all(e["node"] for e in ledger), [e for e in ledger if not e["node"]]
    provider_checks(ledger)
    return judgments, ledger


def provider_checks(ledger: list[dict], limit: int = JUDGE_TOKENS) -> None:
    structured = [e for e in ledger if e["kind"] in ("structured", "repair") and e["status"] == "ok"]
    assert structured and {e["structured_mode"] for e in structured} == {"json_schema"}
    assert all(e["status"] == "ok" for e in ledger), [e["error"] for e in ledger if e["status"] != "ok"]
    for entry in (e for e in ledger if e["status"] == "ok" and not e["cache_hit"]):
        assert entry["model"] == MODEL and entry["prompt_tokens"] > 0
        assert 1 <= entry["completion_tokens"] <= limit


TINY = {"name": "tiny", "setting": "persona"}  # the tests' benchmark: a one-line persona keeps judge prompts short
NO_MEMORY = {"name": "none", "memory": {"backend": "none"}}


def test_pqr_and_aepd_judge_on_the_local_model(tmp_path):
    folder = run(tmp_path, TINY, [NO_MEMORY], [{"name": "pqr", "max_criteria": 1}, {"name": "aepd"}])
    judgments, _ = check_protocol_of_run(
        folder, ["pqr", "aepd"], {"pqr_criteria", "pqr_judge", "pqr_fact_checker", "aepd_judge"}
    )
    [pqr] = [j for j in judgments if j["judge"] == "pqr"]
    if pqr["error"] is None:
        assert set(pqr["criteria"]) >= {"P", "Q", "R"}  # the weights' scale no longer fails it
    else:  # SmolLM2 may write analyses of punctuation only ("]["), twice: gated, never averaged in
        assert "still degenerate after asking again" in pqr["error"] and "local/smollm2" in pqr["error"]


def test_pairwise_lampqa_judges_on_the_local_model(tmp_path):
    systems = [NO_MEMORY, {"name": "full", "memory": {"backend": "full", "budget_tokens": 200}}]
    folder = run(tmp_path, TINY, systems, [{"name": "lampqa_pairwise", "baseline": "none"}])
    [pairwise], ledger = check_protocol_of_run(folder, ["lampqa_pairwise"], {"lampqa_judge"})
    assert sum(e["role"] == "lampqa_judge" and e["status"] == "ok" for e in ledger) == 2  # both orders asked
    if pairwise["error"] is None:  # the baseline is not compared with itself: one judgment
        assert {"first_order", "swapped_order"} <= set(pairwise["details"])


@pytest.mark.parametrize(
    ("benchmark", "roles"),
    [
        ({"name": "sample", "split": "all", "setting": "context"}, {"bespoke_rubric", "bespoke_judge"}),  # R-J pairs
        ({"name": "locomo"}, {"locomo_judge"}),
        ({"name": "prefeval"}, {"prefeval_judge"}),
    ],
    ids=["bespoke", "locomo", "prefeval"],
)
def test_bespoke_locomo_and_prefeval_judge_on_the_local_model(tmp_path, benchmark, roles):
    judge = {"sample": "bespoke"}.get(benchmark["name"], benchmark["name"])
    folder = run(tmp_path, benchmark, [{"name": "none", "memory": {"backend": "none"}}], [{"name": judge}])
    check_protocol_of_run(folder, [judge], roles)


def test_the_simulated_user_talks_with_a_system_on_the_local_model(tmp_path):
    systems = [{"name": "talk", "memory": {"backend": "none"}, "conversation": {"max_turns": 2}}]
    folder = run(tmp_path, TINY, systems, [])
    [result] = lines(folder / "results.jsonl")
    assert result["status"] == "ok", result.get("error")
    conversation = result["response"]["meta"]["conversation"]
    assert 1 <= conversation["user_turns"] <= 2 and conversation["ended"]
    ledger = lines(folder / "ledger.jsonl")
    sim = [e for e in ledger if e["role"] == "user_sim"]
    assert sim and all(e["node"] for e in sim)
    provider_checks(ledger)


async def test_the_simulated_user_answers_questions_and_writes_a_history(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    gateway = Gateway(
        {
            "user_sim": ModelSettings(model=MODEL, max_tokens=JUDGE_TOKENS),
            "history_writer": ModelSettings(model=MODEL, max_tokens=HISTORY_TOKENS),
        },
        ledger=ledger,
    )
    [case] = load_cases("tiny", split="all", setting="persona", limit=1)
    questions = ["How much time do you have for this?", "What is your mother's maiden name?"]
    # a small persona: one preference tag (five items) and one other facet
    persona = {
        "Preferences and Interests": {"Hobbies": "birdwatching on weekend mornings"},
        "Basic Attributes": {"Occupation": "nurse"},
    }
    try:
        with call_tags(node="clarify"):
            simulated = await answer_clarification(gateway, case, ClarifyRequest(questions=questions))
        with call_tags(node="write_history"):
            history = await synthesize_history(gateway, "u1", persona, HistoryOptions(items_per_trait=1))
        events = context_history(history.record)
        with call_tags(node="reversibility"):
            report = await check_reversibility(gateway, persona, events, role="user_sim")
    finally:
        await gateway.aclose()
    answers = simulated.answers.answers
    assert len(answers) == 2 and all(a.strip() for a in answers)
    assert simulated.unknown == sum(a == DONT_KNOW for a in answers)
    figures = check_protocol(persona, history.record, rules=history_rules(persona, "en"))
    # every planned item was either written and passed the content checks, or is reported with its reasons
    assert figures.items + sum(len(t.reasons) for t in history.traits.values()) == 6
    assert not figures.content_failures
    assert report.traits == 2 and sum(report.counts.values()) == 2
    entries = lines(tmp_path / "ledger.jsonl")
    assert [e["node"] for e in entries if e["status"] == "ok"][:1] == ["clarify"]
    # with no item written, nothing is read back: the check then marks every facet missed without a call
    assert {e["node"] for e in entries} == {"clarify", "write_history"} | ({"reversibility"} if events else set())
    if not events:
        assert report.counts["missed"] == 2
    provider_checks(entries, limit=HISTORY_TOKENS)
    print(json.dumps({"answers": answers, "protocol_ok": figures.ok, "reversibility": report.counts}))
