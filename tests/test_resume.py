"""The resume rule (`runs.resume`): what may change when a run folder is resumed, and what it
invalidates. The end-to-end behaviour is in test_runner.py; these pin the rule itself."""

from __future__ import annotations

import pytest

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from atelier.runs.folder.resume import JUDGE_SIDE, SYSTEM_SIDE, check_resume

BASE = {
    "seed": 0,
    "benchmark": {"name": "tiny", "split": None, "setting": None, "limit": 3, "options": {}},
    "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
    "systems": [{"name": "a", "pipeline": "direct", "memory": {"backend": "none"}, "models": {}}],
    "judges": [{"name": "lampqa_aspects"}],
    "run": {"concurrency": 4},
    "web": {"provider": "searxng"},
}


def changed(**edits) -> dict:
    recipe = {key: (dict(value) if isinstance(value, dict) else value) for key, value in BASE.items()}
    for path, value in edits.items():
        *parents, leaf = path.split("__")
        node = recipe
        for part in parents:
            node = node[part] if not part.isdigit() else node[int(part)]
        node[leaf] = value
    return recipe


def test_every_role_is_on_exactly_one_side():
    assert set(SYSTEM_SIDE).isdisjoint(JUDGE_SIDE)
    assert {"system", "user_sim", "researcher", "writer"} <= set(SYSTEM_SIDE)
    assert {"judge", "pqr_judge", "lampqa_judge", "meta_judge"} <= set(JUDGE_SIDE)


@pytest.mark.parametrize(
    ("edits", "refused"),
    [
        ({"seed": 1}, ["seed"]),
        ({"benchmark__setting": "persona"}, ["benchmark.setting"]),
        ({"models__system": {"model": "scripted?seed=2"}}, ["models.system"]),
        ({"models__system": {"model": "scripted", "temperature": 0.7}}, ["models.system"]),
        ({"models__user_sim": {"model": "openai/gpt-4o-mini"}}, ["models.user_sim"]),
        ({"models__writer": {"model": "scripted", "max_tokens": 9}}, ["models.writer"]),
        ({"web": {"provider": "searxng", "max_results": 3}}, ["web"]),
    ],
)
def test_what_decides_a_system_output_may_not_change(edits, refused):
    check = check_resume(BASE, changed(**edits))
    assert check.refused == refused


@pytest.mark.parametrize(
    "edits",
    [
        {"models__judge": {"model": "scripted?seed=3"}},
        {"judges": [{"name": "lampqa_aspects", "details": "narrative"}]},
        {"judges": []},
    ],
)
def test_what_decides_only_judgments_may_change_and_invalidates_them(edits):
    check = check_resume(BASE, changed(**edits))
    assert check.refused == [] and check.judgments_changed


@pytest.mark.parametrize(
    "edits",
    [
        {"benchmark__limit": 1},
        {"run": {"concurrency": 1}},
        {"models__system": {"model": "scripted?latency_ms=20&error_rate=0.3", "timeout_s": 9, "max_retries": 0}},
        {"models__judge": {"model": "scripted?error_rate=0.5", "rpm": 60, "max_concurrency": 1, "api_key": "sk-x"}},
    ],
)
def test_what_decides_no_answer_may_change_freely(edits):
    assert check_resume(BASE, changed(**edits)) == check_resume(BASE, BASE)
    assert check_resume(BASE, BASE).refused == [] and not check_resume(BASE, BASE).judgments_changed


async def test_answer_identity_is_what_the_response_cache_keys_on(tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    messages = [{"role": "user", "content": "Name three birds that live by rivers."}]
    first = ModelSettings(model="scripted", temperature=0.2)
    variants = {
        "same answer": ModelSettings(
            model="scripted?latency_ms=5&error_rate=0.0",
            temperature=0.2,
            timeout_s=3,
            max_retries=1,
            rpm=100,
            max_concurrency=2,
            api_key="sk-x",
        ),
        "other seed": ModelSettings(model="scripted?seed=4", temperature=0.2),
        "other temperature": ModelSettings(model="scripted", temperature=0.3),
        "other max tokens": ModelSettings(model="scripted", temperature=0.2, max_tokens=50),
    }
    await Gateway({"system": first}, cache=cache, ledger=Ledger(None)).text("system", messages)
    for name, settings in variants.items():
        ledger = Ledger(None)
        await Gateway({"system": settings}, cache=cache, ledger=ledger).text("system", messages)
        same_identity = settings.answer_identity() == first.answer_identity()
        assert ledger.entries[0].cache_hit is same_identity, name
        assert same_identity is (name == "same answer")
