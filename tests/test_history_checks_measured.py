"""Issue 50, item 5: history checks with measured precision. The crafted, labelled histories
(`agents/user_sim/history_checks.jsonl`): the offline rules flag none of the consistent, harmless or
paraphrased items and catch what they report; copies lightly edited are copies; an item said again
in other words is a duplicate (sentence vectors); the model judge is measured on the same set; and
`simulate history` and `simulate check` give the same verdict on the same file."""

from __future__ import annotations

import asyncio
import json

import pytest

from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim.contradiction import offline_contradictions
from atelier.runs.studies.history_checks import LABELLED, measure_checks, read_labelled
from atelier.runs.studies.simulate_history import (
    HistoryJob,
    check_contexts,
    history_outcome,
    run_history_job,
    written_with,
)
from tests.openai_stub import OpenAIStub
from tests.test_cli_e2e import atelier, env  # noqa: F401 (env: the CLI tests' fixture)
from tests.test_history_content_checks import user1  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def measured() -> dict:
    return asyncio.run(measure_checks())


def test_no_consistent_harmless_or_paraphrased_item_is_flagged(measured) -> None:
    for part in ("tuning", "held-out"):
        for check in ("offline_contradictions", "copies", "near_duplicates"):
            assert measured[part][check]["false_positives"] == [], (part, check)


def test_what_the_checks_catch_is_measured_on_items_they_were_not_tuned_on(measured) -> None:
    items = read_labelled()
    assert len(items) >= 120 and {i.set for i in items} == {"tuning", "held-out"}
    tuning, held = measured["tuning"], measured["held-out"]
    assert tuning["offline_contradictions"]["should_flag"] == 27 and tuning["offline_contradictions"]["recall"] == 1.0
    assert tuning["copies"]["caught"] == tuning["copies"]["should_flag"] == 14  # 9 of them lightly edited
    assert tuning["near_duplicates"]["caught"] == tuning["near_duplicates"]["should_flag"] == 8
    # the held-out items: what the rules make of text they were not written for (docs quote it)
    assert held["offline_contradictions"]["should_flag"] == 6 and held["offline_contradictions"]["caught"] >= 5
    assert held["near_duplicates"]["caught"] == held["near_duplicates"]["should_flag"] == 2
    assert measured["embedder"] == "all-MiniLM-L6-v2"


def test_the_sentences_the_review_found_flagged_or_missed(user1) -> None:
    """The reviewer's examples, for a 19-21-year-old computer science undergraduate in Suzhou, Jiangsu."""
    harmless = [
        "I was born in October.",
        "I'm 100 percent sure the lab is open.",
        "I'm 15 minutes from the library.",
        "My cousin works as a nurse.",
        "I'm from China.",
    ]
    contradicting = [
        "I live in Nanjing, Jiangsu.",  # another city of the same province
        "I'm 23 and busy.",
        "I just turned 27.",
        "I'm a software engineer at a startup.",  # a student claiming his field's job
        "I work as a data analyst.",
        "I teach biology at a middle school.",
    ]
    found = offline_contradictions(user1, [(str(i), t) for i, t in enumerate(harmless + contradicting)])
    assert sorted(found, key=int) == [str(i) for i in range(len(harmless), len(harmless) + len(contradicting))]


def _stub_judge(base: str) -> ModelSettings:
    return ModelSettings(model="openai/stub-model", api_base=base, api_key="sk-stub", max_retries=0)


def test_the_judge_model_is_measured_on_the_same_set_with_the_stub() -> None:
    with OpenAIStub() as stub:
        figures = asyncio.run(measure_checks(judge=_stub_judge(stub.base_url)))
        stub.script(["400"] * 50)  # a judge that refuses: its failure is said, its items not flagged
        refused = asyncio.run(measure_checks(judge=_stub_judge(stub.base_url).model_copy(update={"seed": 1})))
    assert figures["judge"] == {"model": "openai/stub-model", "dry_run": False, "failed": {}}
    for part, positives in (("tuning", 27), ("held-out", 6)):
        judged = figures[part]["judge_contradictions"]
        assert judged["should_flag"] == positives and 0 <= judged["caught"] <= positives
        assert set(judged["by_kind"]) >= {"consistent", "harmless", "contradiction-age"}
    assert figures["labelled"] == str(LABELLED)
    assert set(refused["judge"]["failed"]) == {"User1", "User8", "User17", "User24", "User11", "User23"}
    assert refused["tuning"]["judge_contradictions"]["caught"] == 0


@pytest.mark.battery
def test_check_precision_prints_the_figures_and_exits_3_when_the_judge_fails(tmp_path, env) -> None:
    with OpenAIStub() as stub:
        args = ["simulate", "check-precision", "--judge-model", "openai/stub-model", "--api-base", stub.base_url]
        done = atelier(*args, "--api-key-env", "STUB_KEY", env={**env, "STUB_KEY": "sk-stub"})
        # the preflight's two probes (text, structured) are answered, as a key that works; every judge call then fails
        stub.script(["ok", "ok"] + ["400"] * 50)
        fresh = {**env, "STUB_KEY": "sk-stub", "ATELIER_CACHE_DIR": str(tmp_path / "other-cache")}
        refused = atelier(*args, "--api-key-env", "STUB_KEY", env=fresh)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tuning"]["offline_contradictions"]["false_positives"] == []
    assert refused.returncode == 3 and "the judge could not judge User1's items" in refused.stderr


def test_history_and_check_agree_on_the_same_file(tmp_path, cache_dir) -> None:
    """`simulate history` (its default checks: the scripted checker model too) and `simulate check`
    on the file it wrote: the same checks (check reads the history's manifest), the same verdict."""
    job = HistoryJob(users=["User1"])
    manifest = run_history_job(job, tmp_path / "history")
    contexts = tmp_path / "history" / "contexts_en.jsonl"
    assert written_with(contexts) == job
    checker = job.models["history_checker"]
    report = asyncio.run(check_contexts(contexts, "en", checker, min_recovered=job.min_recovered))
    assert history_outcome(report)[0] == history_outcome(manifest)[0]
    assert history_outcome(report)[1][0] == history_outcome(manifest)[1][0]  # "users: ..."
    mine, theirs = report["per_user"]["User1"], manifest["per_user"]["User1"]
    assert mine["protocol"]["problems"] == theirs["protocol"]["problems"]
    assert mine.get("reversibility_problems") == theirs.get("reversibility_problems")
    assert mine["protocol"]["meaning_checked"] == 0  # the scripted writer's word lists: by their words only
    offline = asyncio.run(check_contexts(contexts, "en", None))
    assert "reversibility" not in offline["per_user"]["User1"]  # no checker: the offline checks alone
