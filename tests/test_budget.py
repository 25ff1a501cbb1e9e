"""The budget (issue 35, item 2; issue 50, item 4): `[run] budget_usd` / `--budget-usd` sends no call
that could take spend past it — each holds its bound (prompt and max_tokens at its price) while in
flight and settles for what it cost — stops the run with exit 3 "budget reached", and resumes with a
larger one; a budget over a model with no known price is refused before any call."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from atelier.runs.execution.cost import Budget
from tests.openai_stub import OpenAIStub
from tests.test_cli_errors import atelier, one_error_line

RECIPE = """
name = "budgeted"
seed = 0

[benchmark]
name = "sample"
split = "all"
setting = "context"
limit = 3

[models.system]
model = "openai/stub-model"
api_base = "{base}"
api_key = "sk-stub"
max_retries = 0
max_tokens = 400
input_cost_per_token = 2e-6
output_cost_per_token = 8e-6

[models.judge]
model = "openai/stub-model"
api_base = "{base}"
api_key = "sk-stub"
max_retries = 0
max_tokens = 300
input_cost_per_token = 2e-6
output_cost_per_token = 8e-6

[[systems]]
name = "direct-none"
pipeline = "direct"
memory = {{ backend = "none" }}

[[systems]]
name = "direct-full"
pipeline = "direct"
memory = {{ backend = "full", budget_tokens = 1500 }}

[[judges]]
name = "lampqa_aspects"

[run]
concurrency = 4
"""


async def test_a_call_that_does_not_fit_waits_for_the_calls_in_flight():
    """Issue 50, item 4: a call's bound that does not fit beside the calls in flight waits for them
    (they settle for what they cost) instead of ending the run; only one that cannot fit with none
    in flight reaches the budget, and then no other call is sent and no episode starts."""
    import asyncio

    budget = Budget(1.0, {"a": 0.1}, spent_before=0.15)
    assert await budget.hold(0.4) and await budget.hold(0.4)
    assert budget.held == pytest.approx(0.8)
    third = asyncio.create_task(budget.hold(0.4))  # 0.15 + 0.8 + 0.4 > 1: it waits
    await asyncio.sleep(0.01)
    assert not third.done() and not budget.reached
    budget.settle(0.4, 0.05)  # the first cost 0.05: 0.2 + 0.4 + 0.4 fits
    assert await third and budget.peak_committed <= 1.0
    budget.settle(0.4, 0.4)
    budget.settle(0.4, 0.3)
    assert budget.held == 0.0 and budget.spent == pytest.approx(0.15 + 0.05 + 0.4 + 0.3)
    assert not await budget.hold(0.4) and budget.reached  # 0.9 + 0.4 > 1 with none in flight
    assert not await budget.hold(0.01)  # it would fit, but the run sends no other call
    assert await budget.start("a") is None  # nor starts an episode
    assert budget.line() == "budget reached: spent $0.9000 of $1.0000; resume with a larger --budget-usd"
    assert budget.as_dict()["refused"] == {"what": "call", "need_usd": 0.4}
    assert budget.as_dict()["peak_committed_usd"] <= 1.0


async def test_an_episode_starts_while_one_like_those_run_fits_and_an_executor_elsewhere_holds_its_worst_case():
    budget = Budget(1.0, {"a": 0.2})
    assert await budget.start("a") == 0.0  # its calls hold for themselves
    budget.finish("a", 0.0, 0.35)  # it cost more than planned: the plan follows
    assert budget.planned("a") == 0.35
    budget.spent_now = 0.7
    assert await budget.start("a") is None and budget.reached  # 0.7 + 0.35 > 1: it will never fit
    ray = Budget(0.5, {"a": 0.01}, worst_case_usd={"a": 0.25}, hold_calls=False)
    assert await ray.start("a") == 0.25 and await ray.start("a") == 0.25 and not ray.reached
    ray.finish("a", 0.25, 0.05)
    assert ray.spent == pytest.approx(0.05) and ray.held == pytest.approx(0.25)


def test_a_budget_over_an_unknown_price_is_refused_before_any_call(tmp_path, capsys, monkeypatch, cache_dir):
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        "runs/recipes/quickstart.toml",
        "--model",
        "openai/atelier-unpriced",
        "--api-base",
        "http://127.0.0.1:9/v1",  # nothing listens: a call would fail, and none is made
        "--budget-usd",
        "1",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
    )
    line = one_error_line(err)
    assert code == 2
    assert "[run] budget_usd: role system of system 'direct-none' uses openai/atelier-unpriced" in line
    assert "set input_cost_per_token and output_cost_per_token" in line
    assert not (tmp_path / "run" / "ledger.jsonl").exists()


def test_a_budget_that_is_not_positive_is_refused(tmp_path, capsys, monkeypatch, cache_dir):
    code, _, err = atelier(
        capsys, monkeypatch, "run", "runs/recipes/quickstart.toml", "--budget-usd", "0", "--out", str(tmp_path / "r")
    )
    assert code == 2 and "budget_usd" in one_error_line(err)


def test_a_priced_stub_run_stops_before_its_budget_and_resumes_with_a_larger_one(
    tmp_path, capsys, monkeypatch, cache_dir
):
    folder = tmp_path / "run"
    with OpenAIStub(answer_fill=0.5) as stub:
        recipe = tmp_path / "budgeted.toml"
        recipe.write_text(RECIPE.format(base=stub.base_url))

        def run(budget: str) -> tuple[int, str]:
            code, _, err = atelier(
                capsys, monkeypatch, "run", str(recipe), "--budget-usd", budget, "--no-progress", "--out", str(folder)
            )
            return code, err

        # every call holds its bound while in flight; an episode starts while one like those run fits
        code, err = run("0.05")
        summary = json.loads((folder / "summary.json").read_text())
        ledger = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
        spent = sum(e["cost_usd"] or 0 for e in ledger if not e["cache_hit"] and e["status"] == "ok")
        assert code == 3, err
        budget = summary["budget"]
        reached = [line for line in err.splitlines() if line.startswith("budget reached: ")]
        assert reached == [  # what the calls cost, as the ledger has them
            f"budget reached: spent ${budget['spent_usd']:.4f} of $0.0500; resume with a larger --budget-usd"
        ]
        assert budget["reached"] and budget["limit_usd"] == 0.05 and budget["holds"] == "calls"
        assert budget["spent_usd"] == pytest.approx(spent, abs=1e-6) and spent <= 0.05  # never passed
        assert summary["episodes"]["budget_reached"] == reached[0]
        done = [json.loads(line)["key"] for line in (folder / "results.jsonl").read_text().splitlines()]
        planned, worst = budget["per_episode_planned_usd"], budget["per_episode_worst_case_usd"]
        assert 0 < planned["direct-none"] < worst["direct-none"] and 0 < planned["direct-full"] < worst["direct-full"]
        assert budget["peak_committed_usd"] <= 0.05  # spent + the bounds in flight never passed it
        assert 1 <= len(done) < 6 and summary["episodes"]["missing"] == 6 - len(done)
        assert all(json.loads(line)["cost_usd"] > 0 for line in (folder / "results.jsonl").read_text().splitlines())

        code, err = run("0.5")  # spend so far counts from the ledger: the rest fits in $0.50
        assert code == 0, err
        assert "budget reached" not in err and f"{len(done)} of 6 episodes already done" in err
    summary = json.loads((folder / "summary.json").read_text())
    keys = Counter(json.loads(line)["key"] for line in (folder / "results.jsonl").read_text().splitlines())
    assert len(keys) == 6 and set(keys.values()) == {1}  # nothing run twice
    assert not summary["budget"]["reached"] and summary["episodes"]["scored"] == 6
    assert summary["budget"]["spent_usd"] == pytest.approx(summary["ledger"]["cost_usd"], abs=1e-6)
    assert summary["ledger"]["cost_usd"] <= 0.5
