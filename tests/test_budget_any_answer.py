"""Issue 50, item 4: a budget holds for answers of any length — from one token to `max_tokens`, the
judges' prompts carrying them — at any concurrency: spent plus the bounds of the calls in flight
never passes it; a run of short answers uses at least 90% of it before stopping; and the forecast's
range holds what a priced stub run takes with short and with verbose answers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atelier.runs.execution.budget import Budget
from atelier.runs.execution.cost import forecast
from atelier.runs.execution.runner import dry_run_ledger
from atelier.runs.folder.recipe import load_recipe
from tests.openai_stub import OpenAIStub
from tests.test_budget_in_flight import PRICED, ledger_spend, run_budgeted


class Watched(Budget):
    """A budget that checks, at every change, that spent + held stays within it."""

    worst = 0.0

    def _check(self) -> None:
        self.worst = max(self.worst, self.spent + self.held)
        assert self.spent + self.held <= self.limit_usd + 1e-12, (self.spent, self.held)

    async def hold(self, bound_usd: float) -> bool:
        granted = await super().hold(bound_usd)
        self._check()
        return granted

    def settle(self, bound_usd: float, spent_usd: float) -> None:
        super().settle(bound_usd, spent_usd)
        self._check()


async def _run(budget: Budget, concurrency: int, fill: float, seed: int, episodes: int = 3000) -> int:
    """Episodes of 2-6 calls each (a judge's bound grows with the answer before it), `concurrency` at
    once; each call costs from one token to its bound, `fill` of the way. Returns episodes finished."""
    rng = np.random.default_rng(seed)
    plans = [rng.uniform(0.002, 0.03, size=rng.integers(2, 7)) for _ in range(episodes)]
    limit = asyncio.Semaphore(concurrency)
    finished = 0

    async def episode(bounds: np.ndarray) -> None:
        nonlocal finished
        async with limit:
            held = await budget.start("a")
            if held is None:
                return
            cost = 0.0
            for bound in bounds:
                if not await budget.hold(float(bound)):
                    budget.finish("a", held, None)
                    return
                await asyncio.sleep(0)  # other calls run meanwhile
                spent = 1e-6 + fill * (float(bound) - 1e-6)
                budget.settle(float(bound), spent)
                cost += spent
            budget.finish("a", held, cost)
            finished += 1

    await asyncio.gather(*(episode(b) for b in plans))
    return finished


@settings(max_examples=25, deadline=None)
@given(concurrency=st.integers(1, 16), fill=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_spent_plus_the_bounds_in_flight_never_pass_the_budget(concurrency, fill, seed) -> None:
    budget = Watched(1.0, {"a": 0.02})
    asyncio.run(_run(budget, concurrency, fill, seed))
    assert budget.peak_committed <= 1.0 + 1e-12 and budget.spent <= 1.0 + 1e-12


@pytest.mark.parametrize("concurrency", [1, 16])
def test_a_run_of_short_answers_uses_nine_tenths_of_its_budget(concurrency) -> None:
    budget = Watched(1.0, {"a": 0.06})  # the forecast thought an episode costs far more than short answers do
    asyncio.run(_run(budget, concurrency, fill=0.02, seed=1, episodes=20_000))
    assert budget.reached and budget.spent >= 0.9


def _priced(tmp_path, base: str, limit: int, max_tokens: int):
    """The quickstart on the priced stub: `limit` cases, every role's completions capped at `max_tokens`."""
    text = open("runs/recipes/quickstart.toml").read()
    scripted = '[models.system]\nmodel = "scripted"\n\n[models.judge]\nmodel = "scripted"\n'
    priced = PRICED.format(base=base).replace("max_retries = 0\n", f"max_retries = 0\nmax_tokens = {max_tokens}\n")
    text = text.replace(scripted, priced).replace("limit = 8", f"limit = {limit}")
    path = tmp_path / f"priced-{max_tokens}.toml"
    path.write_text(text + "\n[cache]\nenabled = false  # each run pays for its calls\n")
    return path


@pytest.mark.timeout(900)
def test_verbose_answers_at_concurrency_16_never_pass_the_budget(tmp_path, capsys, monkeypatch, cache_dir):
    """The issue's case: answers filling 90% of max_tokens (4,800), 16 episodes at once."""
    with OpenAIStub(answer_fill=0.9) as stub:
        recipe = _priced(tmp_path, stub.base_url, limit=8, max_tokens=4800)
        code, summary = run_budgeted(capsys, monkeypatch, recipe, tmp_path / "run", 0.087, 16)
    assert code == 3 and summary["budget"]["reached"]
    assert summary["budget"]["peak_committed_usd"] <= 0.087
    assert max(ledger_spend(tmp_path / "run")) <= 0.087  # what the calls cost, in the order they came back


@pytest.mark.battery
@pytest.mark.timeout(2400)
@pytest.mark.parametrize(("fill", "cases", "max_tokens"), [(0.0, 21, 600), (0.9, 6, 4800)])
def test_short_and_verbose_answers_keep_the_budget_at_any_concurrency_and_the_forecast_holds_them(
    fill, cases, max_tokens, tmp_path, capsys, monkeypatch, cache_dir
):
    """Short answers: one token a text answer, on every case of the sample suite, so that the budget
    is more than ten calls' bounds (the last call that does not fit leaves at most its bound unused);
    verbose: 90% of a 4,800-token max_tokens."""
    with OpenAIStub(answer_fill=fill) as stub:
        recipe = _priced(tmp_path, stub.base_url, limit=cases, max_tokens=max_tokens)
        predicted = forecast(load_recipe(str(recipe)), run=dry_run_ledger, sample=2)
        code, full = run_budgeted(capsys, monkeypatch, recipe, tmp_path / "full", 10.0, 4)
        actual = full["ledger"]["cost_usd"]
        assert code == 0 and predicted.total["usd"].low <= actual <= predicted.total["usd"].high, (
            predicted.total["usd"],
            actual,
        )
        budget = round(actual * 0.6, 6)  # it cannot finish: it stops
        for concurrency in (1, 16):
            out = tmp_path / f"c{concurrency}"
            code, summary = run_budgeted(capsys, monkeypatch, recipe, out, budget, concurrency)
            assert code == 3 and summary["budget"]["peak_committed_usd"] <= budget
            assert max(ledger_spend(out)) <= budget
            if fill == 0.0:  # short answers: nearly all of it is used before stopping
                assert summary["budget"]["spent_usd"] >= 0.9 * budget, summary["budget"]
