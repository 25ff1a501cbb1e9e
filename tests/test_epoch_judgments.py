"""Issue 50, item 3: each epoch's judgment is an independent sample of the judge — a response that
comes out the same in two epochs is judged twice, with other judge seeds — unless the recipe asks
to reuse judgments (`[run] reuse_judgments`); the variance decomposition counts a reused judgment
once, and the judges' instruments (PQR's criteria, BESPOKE's rubric) are shared by every epoch."""

from __future__ import annotations

import json

import pytest

from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.metrics.variance import variance_components
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.epochs import JUDGE_SEED_STRIDE, epoch_context
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from atelier.runs.folder.results import ResultsFile
from atelier.runs.folder.resume import check_resume
from atelier.runs.reading.summary import repeat_scores
from tests.openai_stub import OpenAIStub


def _context() -> EpisodeContext:
    return EpisodeContext(
        run_id="r",
        models={
            "system": ModelSettings(model="scripted", seed=5),
            "judge": ModelSettings(model="scripted", seed=5),
            "pqr_criteria": ModelSettings(model="scripted", seed=3),
        },
        system=SystemSpec(name="a", models={"lampqa_judge": ModelSettings(model="scripted", seed=1)}),
        seed=7,
    )


def test_a_later_epoch_moves_the_judges_seeds_past_every_repeat_of_another_epoch() -> None:
    third = epoch_context(_context(), 3).role_models()
    assert third["judge"].seed == 5 + 2 * JUDGE_SEED_STRIDE and third["lampqa_judge"].seed == 1 + 2 * JUDGE_SEED_STRIDE
    assert third["pqr_criteria"].seed == 3  # the judge's instrument: the same criteria in every epoch
    assert third["system"].seed == 7  # the system side moves by one an epoch, as before
    # a repeat moves a judge's seed by its index (at most 19): no epoch's repeat meets another's
    assert JUDGE_SEED_STRIDE >= 20
    reused = epoch_context(_context(), 3, reuse_judgments=True).role_models()
    assert reused["judge"].seed == 5 and reused["lampqa_judge"].seed == 1 and reused["system"].seed == 7


def _recipe(tmp_path, base: str, reuse: bool):
    """The quickstart, two epochs of two cases: the system on the stub, which answers the same prompt
    the same way whatever the seed (so every epoch's response is the same), judged by the scripted
    model (whose verdict moves with its seed)."""
    data = load_recipe("runs/recipes/quickstart.toml").model_dump(mode="python")
    stub = {"model": "openai/stub-model", "api_base": base, "api_key": "sk-stub", "max_retries": 0, "temperature": 0.7}
    data["models"]["system"] = stub
    data["benchmark"]["limit"] = 2
    data["run"] |= {"epochs": 2, "reuse_judgments": reuse, "concurrency": 1}  # an epoch after the other
    data["systems"] = data["systems"][:1]
    return parse_recipe(data)


@pytest.mark.parametrize("reuse", [False, True])
def test_the_same_response_in_two_epochs_is_judged_twice_unless_the_recipe_reuses_judgments(tmp_path, cache_dir, reuse):
    with OpenAIStub() as stub:
        folder = run_recipe(_recipe(tmp_path, stub.base_url, reuse), tmp_path / "run", progress=False)
    records = list(ResultsFile(folder.results).load().values())
    by_case: dict[str, dict[int, object]] = {}
    for r in records:
        by_case.setdefault(r.case_id, {})[r.epoch] = r
    judged = [json.loads(line) for line in folder.ledger.read_text().splitlines()]
    judged = [e for e in judged if e["role"] == "lampqa_judge" and e["status"] == "ok"]
    for epochs in by_case.values():
        first, second = epochs[1], epochs[2]
        assert first.response.text == second.response.text  # the system answered the same both times
    keys = {epoch: {e["request_key"] for e in judged if e["epoch"] == epoch} for epoch in (1, 2)}
    called = [e["request_key"] for e in judged if not e["cache_hit"]]
    if reuse:  # the same judge requests in both epochs, each called once (the other answered from the cache)
        assert keys[1] == keys[2] and sorted(called) == sorted(keys[1])
        assert all(epochs[1].judgments[0].details == epochs[2].judgments[0].details for epochs in by_case.values())
    else:  # each epoch's judgment another sample of the judge: requests of their own, each called
        assert keys[1] and keys[2] and not keys[1] & keys[2] and sorted(called) == sorted(keys[1] | keys[2])
    scores = repeat_scores(records, "direct-none", "lampqa_aspects", reused=reuse)
    assert all(len(epochs) == (1 if reuse else 2) for epochs in scores.values())  # a reused judgment counts once
    summary = json.loads(folder.summary.read_text())
    variance = summary["systems"]["direct-none"]["judges"]["lampqa_aspects"]["variance"]
    assert variance == variance_components(scores).model_dump()


def test_changing_whether_judgments_are_reused_judges_the_stored_responses_again() -> None:
    data = load_recipe("runs/recipes/quickstart.toml").model_dump(mode="json")
    other = json.loads(json.dumps(data))
    other["run"]["reuse_judgments"] = True
    check = check_resume(data, other)
    assert check.judgments_changed and not check.refused
