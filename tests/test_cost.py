"""What a run will cost, before paying (issue 35, item 2): the forecast calls no provider, prices
with litellm's cost map or the role's own prices, and a real run of answers of realistic length
(the stub server) falls inside its ranges."""

from __future__ import annotations

import json

from atelier.runs.execution.cost import forecast
from atelier.runs.execution.runner import dry_run_ledger, run_recipe
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from tests.openai_stub import OpenAIStub
from tests.test_cli_errors import atelier

QUICKSTART = "runs/recipes/quickstart.toml"


def test_the_quickstart_priced_for_gpt_4o_mini_without_a_provider_call(capsys, monkeypatch, cache_dir):
    import litellm

    real = litellm.acompletion
    asked: list[str] = []

    async def scripted_only(*args, **kwargs):  # the dry run answers with `scripted` alone
        asked.append(str(kwargs.get("model")))
        if not asked[-1].startswith("scripted"):
            raise AssertionError(f"a provider was called: {asked[-1]}")
        return await real(*args, **kwargs)

    monkeypatch.setattr(litellm, "acompletion", scripted_only)
    code, out, err = atelier(
        capsys, monkeypatch, "recipe", "cost", QUICKSTART, "--model", "openai/gpt-4o-mini", "--limit", "2", "--json"
    )
    assert code == 0, err
    predicted = json.loads(out)
    assert predicted["episodes"] == 4 and predicted["sampled_cases"] == 2
    assert 0 < predicted["total"]["usd"]["low"] < predicted["total"]["usd"]["high"]
    system, judge = predicted["roles"]["system"], predicted["roles"]["lampqa_judge"]
    assert system["price"] == {"input_per_token": 1.5e-07, "output_per_token": 6e-07, "source": "litellm"}
    # measured on every case, still a range: a real model's answers are not the dry run's (issue 41)
    calls = system["calls"]
    assert calls["point"] == 4 and calls["low"] < 4 < calls["high"] == 8 and judge["calls"]["point"] >= 4
    assert system["max_tokens"] == 16384 and not system["max_tokens_assumed"]  # litellm's limit for the model
    assert asked and all(model.startswith("scripted") for model in asked)


def test_an_unknown_price_is_null_never_zero(capsys, monkeypatch, cache_dir):
    code, out, _ = atelier(
        capsys,
        monkeypatch,
        "recipe",
        "cost",
        QUICKSTART,
        "--model",
        "openai/atelier-unpriced",
        "--limit",
        "1",
        "--json",
    )
    predicted = json.loads(out)
    assert code == 0 and predicted["total"]["usd"] is None
    assert predicted["total"]["unpriced_roles"] == ["lampqa_judge", "system"]
    assert any("4096 tokens assumed" in note for note in predicted["notes"])


def test_a_stub_run_of_realistic_answers_falls_inside_the_forecast(tmp_path, cache_dir):
    with OpenAIStub(answer_fill=0.5) as stub:
        model = {
            "model": "openai/stub-model",
            "api_base": stub.base_url,
            "api_key": "sk-stub",
            "max_retries": 0,
            "input_cost_per_token": 2e-6,
            "output_cost_per_token": 8e-6,
        }
        data = load_recipe(QUICKSTART).model_dump(mode="python")
        data["models"] = {"system": {**model, "max_tokens": 400}, "judge": {**model, "max_tokens": 300}}
        data["benchmark"]["limit"] = 3
        data["run"]["out_dir"] = str(tmp_path / "out")
        recipe = parse_recipe(data)
        predicted = forecast(recipe, run=dry_run_ledger, sample=2)
        folder = run_recipe(recipe, tmp_path / "run", progress=False)
    ledger = [json.loads(line) for line in folder.ledger.read_text().splitlines()]
    spent = {}
    for entry in ledger:
        if entry["system"] and entry["status"] == "ok":
            got = spent.setdefault(entry["role"], {"calls": 0, "prompt": 0, "completion": 0, "usd": 0.0})
            got["calls"] += 1
            got["prompt"] += entry["prompt_tokens"]
            got["completion"] += entry["completion_tokens"]
            got["usd"] += entry["cost_usd"]
    assert set(spent) == set(predicted.roles) == {"system", "lampqa_judge"}
    for role, got in spent.items():
        expected = predicted.roles[role]
        assert expected.calls.low <= got["calls"] <= expected.calls.high, (role, got, expected.calls)
        assert expected.prompt_tokens.low <= got["prompt"] <= expected.prompt_tokens.high, (role, got, expected)
        assert expected.completion_tokens.low <= got["completion"] <= expected.completion_tokens.high, (role, got)
        assert expected.usd.low <= got["usd"] <= expected.usd.high, (role, got, expected.usd)
    summary = json.loads(folder.summary.read_text())
    assert predicted.total["usd"].low <= summary["ledger"]["cost_usd"] <= predicted.total["usd"].high
