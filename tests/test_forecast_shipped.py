"""Issue 41, item 4: the cost forecast's ranges contain what the shipped recipes actually take —
calls, prompt and completion tokens and dollars per role — on the scripted model and on an
OpenAI-compatible stub provider (priced), on the cases the forecast sampled. The recipes that need
more than this checkout (external agents' extra, synthesized PDR contexts, the papers' data and
corpora) are left out."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any

import pytest

from atelier.runs.execution.cost import forecast
from atelier.runs.execution.runner import Runner, dry_run_ledger
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from tests.openai_stub import OpenAIStub

RECIPES = ("quickstart", "judges", "pipelines", "memory_access", "agentic", "simulated_users")
GRIDS = ("pipelines", "memory_access")  # every pipeline x backend, over a minute each


def _recipe_on(name: str, model: str) -> Any:
    """Each recipe on the scripted model, and the quickstart on litellm's HTTP path (the stub); in the
    battery, the grids and the other recipes on the stub (each the scripted run again, over HTTP)."""
    in_battery = name in GRIDS or (model == "stub" and name != "quickstart")
    return pytest.param(name, model, marks=pytest.mark.battery if in_battery else ())


RECIPES_AND_MODELS = [_recipe_on(name, model) for name in RECIPES for model in ("scripted", "stub")]
PRICE = {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6}


def on_stub(data: dict, base: str) -> dict:
    """Every role of the recipe on the stub, priced, its own max_tokens kept."""
    model = {"model": "openai/stub-model", "api_base": base, "api_key": "sk-stub", "max_retries": 0, **PRICE}
    roles = {role: {**model, "max_tokens": s.get("max_tokens")} for role, s in data["models"].items()}
    data["models"] = {"system": dict(model), "judge": dict(model), **roles}
    for system in data["systems"]:
        system["models"] = {r: {**model, "max_tokens": m.get("max_tokens")} for r, m in system["models"].items()}
    return data


def spent(folder) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0, "prompt": 0, "completion": 0, "usd": 0.0})
    for line in folder.ledger.read_text().splitlines():
        entry = json.loads(line)
        if entry["system"] and entry["status"] == "ok" and entry["kind"] != "tool":
            got = out[entry["role"]]
            got["calls"] += 1
            got["prompt"] += entry["prompt_tokens"]
            got["completion"] += entry["completion_tokens"]
            got["usd"] += entry["cost_usd"] or 0.0
    return dict(out)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a dry run and a run of a whole recipe (pipelines: every pipeline x backend)
@pytest.mark.parametrize(("name", "model"), RECIPES_AND_MODELS)
def test_the_forecast_contains_what_a_shipped_recipe_takes(name, model, tmp_path, cache_dir):
    with OpenAIStub() as stub:
        data = load_recipe(f"runs/recipes/{name}.toml").model_dump(mode="python")
        if model == "stub":
            data = on_stub(data, stub.base_url)
        data["benchmark"]["limit"] = 2
        data["run"]["out_dir"] = str(tmp_path / "out")
        data["cache"] = {"enabled": False}
        recipe = parse_recipe(data)
        predicted = forecast(recipe, run=dry_run_ledger, sample=2)
        folder = asyncio.run(Runner(recipe, tmp_path / "run", progress=False, preflight=False).run())
    taken = spent(folder)
    assert taken and set(taken) <= set(predicted.roles), (set(taken), set(predicted.roles))
    for role, got in taken.items():
        expected = predicted.roles[role]
        for figure, span in (
            ("calls", expected.calls),
            ("prompt", expected.prompt_tokens),
            ("completion", expected.completion_tokens),
        ):
            assert span.low <= got[figure] <= span.high, (role, figure, got[figure], span)
        if model == "stub":
            assert expected.usd is not None and expected.usd.low <= got["usd"] <= expected.usd.high, (role, got)
    if model == "stub":
        cost = json.loads(folder.summary.read_text())["ledger"]["cost_usd"]
        assert predicted.total["usd"].low <= cost <= predicted.total["usd"].high
