"""A provider answer that broke its contract is never used in silence where nothing records it
(third outside audit): `simulate history` accepted history items from answers cut at max_tokens,
`simulate feedback` wrote ratings from them and `simulate check-precision` measured with them, each
with exit 0 and the cut answers replayed from the cache on a rerun. Work whose output keeps no record
of a breach holds its calls' answers whole (`gateway.answers_whole`): a cut, filtered or unclosed
answer fails that unit of work by the clause's name, as a failed call does."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from atelier.agents.models import answer_contract
from atelier.agents.models.gateway import Gateway, ModelCallError, answers_whole
from atelier.agents.models.settings import ModelSettings
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe


def _gateway(max_tokens: int | None = 100) -> Gateway:
    return Gateway({"user_sim": ModelSettings(model="scripted", max_tokens=max_tokens)})


def test_a_block_whose_answer_was_cut_raises_naming_the_clause_and_a_whole_one_passes():
    gateway = _gateway()
    with answers_whole(gateway, "user_sim") as broken:
        pass
    assert broken == []
    with pytest.raises(ModelCallError) as raised:
        with answers_whole(gateway, "user_sim"):
            answer_contract.note([answer_contract.NOT_CUT.broken("finish_reason length", "feedback")])
    said = str(raised.value)
    assert "the user_sim model scripted's answer was not used" in said
    assert answer_contract.NOT_CUT.name in said and raised.value.verdict == "refused"


class _Answer(BaseModel):
    text: str


def test_an_answer_cut_yet_parsed_is_asked_again_with_a_larger_budget_and_refused_at_the_ceiling(monkeypatch):
    from atelier.agents.user_sim import history

    asked: list[int | None] = []

    async def structured(self, role, messages, schema):
        budget = self.settings(role).max_tokens
        asked.append(budget)
        if budget is None or budget < cut_below:
            answer_contract.note([answer_contract.NOT_CUT.broken(f"cut at {budget}", "writer")])
        return schema(text=f"written with {budget}")

    monkeypatch.setattr(Gateway, "structured", structured)
    raises: list[tuple[int, int]] = []

    cut_below = 300  # whole from 400 on: the ladder 100 -> 200 -> 400 reaches it
    answer, _ = asyncio.run(
        history.ask_within_budget(
            _gateway(), "user_sim", [], _Answer, ceiling=400, on_raise=lambda *r: raises.append(r)
        )
    )
    assert answer.text == "written with 400" and asked == [100, 200, 400] and raises == [(100, 200), (200, 400)]

    asked.clear()
    cut_below = 10_000  # still cut at the ceiling: not used
    with pytest.raises(ModelCallError, match="not cut at the token limit"):
        asyncio.run(history.ask_within_budget(_gateway(), "user_sim", [], _Answer, ceiling=400))
    assert asked == [100, 200, 400]


def test_simulate_feedback_writes_no_rating_from_a_cut_answer(tmp_path, monkeypatch, cache_dir):
    from atelier.runs.studies import simulate_feedback

    recipe = parse_recipe(
        {
            "name": "s",
            "benchmark": {"name": "sample", "limit": 2},
            "systems": [{"name": "direct", "memory": {"backend": "full"}}],
        }
    )
    run_recipe(recipe, tmp_path / "run", progress=False)
    rate = simulate_feedback.rate_response

    async def cut_rating(gateway, case, response, role="user_sim"):
        feedback = await rate(gateway, case, response, role)
        answer_contract.note([answer_contract.NOT_CUT.broken("the rating stopped at max_tokens", "feedback")])
        return feedback

    monkeypatch.setattr(simulate_feedback, "rate_response", cut_rating)
    report = asyncio.run(simulate_feedback.rate_run(tmp_path / "run", tmp_path / "pairs.jsonl", cache=False))
    assert report["rated"] == 0 and report["rj_pairs"] == 0 and len(report["failed"]) == 2
    assert all(answer_contract.NOT_CUT.name in why for why in report["failed"].values())
    assert (tmp_path / "pairs.jsonl").read_text() == ""
