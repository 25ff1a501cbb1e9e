"""Issue 41, item 4 and the acceptance (issue 50, item 4): a budget sends no call that could take
spend past it, under a calibrated forecast; at any concurrency a run uses it up to about one
episode's cost. The quickstart on a priced stub model at concurrency 4: a budget 10x the forecast's
point estimate runs every episode (exit 0); half its actual cost stops it (exit 3), and spent + in
flight never passed the budget."""

from __future__ import annotations

import json

import pytest

from tests.openai_stub import OpenAIStub
from tests.test_cli_errors import atelier

PRICED = """
[models.system]
model = "openai/stub-model"
api_base = "{base}"
api_key = "sk-stub"
max_retries = 0
input_cost_per_token = 2e-6
output_cost_per_token = 8e-6

[models.judge]
model = "openai/stub-model"
api_base = "{base}"
api_key = "sk-stub"
max_retries = 0
input_cost_per_token = 2e-6
output_cost_per_token = 8e-6
"""
# every call's completion bounded: a call holds its prompt and max_tokens at its price (issue 50)
BOUNDED = PRICED.replace("max_retries = 0\n", "max_retries = 0\nmax_tokens = 300\n")


def priced_quickstart(tmp_path, base: str):
    """runs/recipes/quickstart.toml (3 cases: 6 episodes, concurrency 4), every role on the stub."""
    text = open("runs/recipes/quickstart.toml").read()
    scripted = '[models.system]\nmodel = "scripted"\n\n[models.judge]\nmodel = "scripted"\n'
    text = text.replace(scripted, BOUNDED.format(base=base))
    text = text.replace("limit = 8", "limit = 3") + "\n[cache]\nenabled = false  # each run pays for its calls\n"
    assert "stub-model" in text and "concurrency = 4" in text
    path = tmp_path / "quickstart-priced.toml"
    path.write_text(text)
    return path


def run(capsys, monkeypatch, recipe, out, budget: float) -> tuple[int, dict, str]:
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(recipe), "--budget-usd", f"{budget:.6f}", "--no-progress", "--out", str(out)
    )
    return code, json.loads((out / "summary.json").read_text()), err


def run_budgeted(capsys, monkeypatch, recipe, out, budget: float, concurrency: int) -> tuple[int, dict]:
    """`atelier run RECIPE --budget-usd BUDGET --concurrency C`: its exit code and summary.json."""
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        str(recipe),
        "--budget-usd",
        f"{budget:.6f}",
        "--concurrency",
        str(concurrency),
        "--no-progress",
        "--out",
        str(out),
    )
    assert code in (0, 3), err
    return code, json.loads((out / "summary.json").read_text())


def ledger_spend(out) -> list[float]:
    """The run's spend after each provider call, in the order they were written."""
    total, after = 0.0, []
    for line in (out / "ledger.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("kind") != "tool" and not entry["cache_hit"] and entry["status"] == "ok":
            total += entry["cost_usd"] or 0.0
            after.append(total)
    return after


@pytest.mark.slow
@pytest.mark.timeout(1800)  # five runs of the quickstart on the stub, each with its forecast's dry run
def test_the_quickstart_on_a_priced_stub_keeps_its_budget_at_concurrency_4(tmp_path, capsys, monkeypatch, cache_dir):
    with OpenAIStub() as stub:
        recipe = priced_quickstart(tmp_path, stub.base_url)
        code, out, err = atelier(capsys, monkeypatch, "recipe", "cost", str(recipe), "--json")
        assert code == 0, err
        predicted = json.loads(out)
        point = predicted["total"]["usd"]["point"]
        assert predicted["episodes"] == 6 and 0 < point

        # 10x the point estimate: every episode runs
        code, summary, err = run(capsys, monkeypatch, recipe, tmp_path / "ample", 10 * point)
        assert code == 0, err
        assert summary["episodes"]["scored"] == 6 and not summary["budget"]["reached"]
        actual = summary["ledger"]["cost_usd"]
        usd = predicted["total"]["usd"]
        assert usd["low"] <= actual <= usd["high"]  # the forecast's range holds what it cost

        # half what it actually cost: it stops, and never passed the budget
        half = actual / 2
        code, summary, err = run(capsys, monkeypatch, recipe, tmp_path / "half", half)
        assert code == 3 and "budget reached" in err
        assert summary["episodes"]["scored"] < 6
        assert summary["budget"]["peak_committed_usd"] <= half + 1e-9  # spent + in flight
        assert max(ledger_spend(tmp_path / "half"), default=0.0) <= half + 1e-9

        # a budget it cannot finish in: at concurrency 1 and 4 alike it is used until one more episode like
        # those it ran would not fit, and never passed (issue 50: every call holds its bound)
        episode = max(summary["budget"]["per_episode_planned_usd"].values())
        budget = episode + actual / 2
        for concurrency in (1, 4):
            out = tmp_path / f"c{concurrency}"
            run_budgeted(capsys, monkeypatch, recipe, out, budget, concurrency)
            summary = json.loads((out / "summary.json").read_text())
            assert summary["budget"]["peak_committed_usd"] <= budget + 1e-9
            assert max(ledger_spend(out), default=0.0) <= budget + 1e-9
            assert 1 <= summary["episodes"]["scored"] < 6
            # it stopped because one more episode like those it ran would not fit (not before)
            planned = max(summary["budget"]["per_episode_planned_usd"].values())
            assert summary["budget"]["spent_usd"] + planned >= budget, (concurrency, summary["budget"])
