"""Per-facet ablations (PersonaLens-style): a system option hiding persona facets or history kinds,
validated like every recipe key, applied where the system's CaseView is built."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import current_tags
from atelier.benchmarks.case import ViewAblation, facet_matches
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe

DIET = "Preferences and Interests > Lifestyle Preferences > Diet"


@pytest.fixture(scope="module")
def u1_case():
    return next(c for c in load_cases("sample") if c.user_id == "u1")


def test_facet_patterns():
    assert facet_matches("Diet", DIET) and facet_matches("preferences and interests", DIET)
    assert facet_matches("Preferences and Interests > Lifestyle Preferences", DIET)
    assert not facet_matches("Preferences and Interests > Travel Preferences", DIET)
    assert not facet_matches("Lifestyle", DIET) and not facet_matches("Diet > x", DIET)


def test_hiding_a_facet_removes_it_from_the_persona_and_its_items_from_the_history(u1_case):
    hide = ViewAblation(facets=["Diet", "Health Status"])
    persona = u1_case.view("persona", hide=hide).history[0].render()
    assert "Diet:" not in persona and "Health Status" not in persona and "Occupation:" in persona
    assert "Diet:" in u1_case.view("persona").history[0].render()

    linked = {i for i, trait in u1_case.history_traits.items() if hide.hides_facet(trait)}
    assert linked  # the sample suite links u1's items to traits, some to these
    kept = {e.id for e in u1_case.view("context", hide=hide).history}
    assert kept == {e.id for e in u1_case.history} - linked
    both = u1_case.view("persona+context", hide=hide).history
    assert both[0].kind == "persona" and {e.id for e in both[1:]} == kept


def test_hiding_history_kinds(u1_case):
    view = u1_case.view("persona+context", hide=ViewAblation(history_kinds=["chat_session", "persona"]))
    assert view.history and {e.kind for e in view.history} == {e.kind for e in u1_case.history} - {"chat_session"}


def test_hiding_every_facet_leaves_no_persona_event(u1_case):
    sections = list(u1_case.persona.attributes)
    assert u1_case.view("persona", hide=ViewAblation(facets=sections)).history == []


def test_recipe_keys_are_typed_and_errors_name_the_key():
    base = {"name": "a", "benchmark": {"name": "sample"}, "judges": []}
    with pytest.raises(ConfigError, match=r"systems\[0\]\.hide\.history_kinds\[0\]: must be one of"):
        parse_recipe(
            {**base, "systems": [{"name": "s", "memory": {"backend": "full"}, "hide": {"history_kinds": ["diary"]}}]}
        )
    with pytest.raises(ConfigError, match=r"systems\[0\]\.hide\.facet: unknown key"):
        parse_recipe({**base, "systems": [{"name": "s", "memory": {"backend": "full"}, "hide": {"facet": ["Diet"]}}]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.conversation\.max_turns"):
        parse_recipe(
            {**base, "systems": [{"name": "s", "memory": {"backend": "full"}, "conversation": {"max_turns": 0}}]}
        )


def ablation_recipe(tmp_path, facets):
    return parse_recipe(
        {
            "name": "ablate",
            "benchmark": {"name": "sample", "setting": "persona+context"},
            "systems": [
                {"name": "all", "memory": {"backend": "full", "budget_tokens": 20000}},
                {"name": "no-diet", "memory": {"backend": "full", "budget_tokens": 20000}, "hide": {"facets": facets}},
            ],
            "judges": [],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )


def test_a_pattern_matching_nothing_is_refused_before_any_episode(tmp_path):
    with pytest.raises(ConfigError, match=r"systems\[1\]\.hide\.facets: 'Dyet' matches no persona facet"):
        run_recipe(ablation_recipe(tmp_path, ["Diet", "Dyet"]), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_the_hidden_system_never_sees_the_facet_or_its_items(tmp_path, cache_dir, monkeypatch, u1_case):
    seen: dict[str, list[str]] = defaultdict(list)
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        seen[current_tags().get("system", "?")].append(json.dumps(messages, ensure_ascii=False))
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    run_recipe(ablation_recipe(tmp_path, ["Diet"]), progress=False)
    diet = u1_case.persona.attributes["Preferences and Interests"]["Lifestyle Preferences"]["Diet"]
    diet_items = [e.render() for e in u1_case.history if u1_case.history_traits[e.id] == DIET]
    assert diet_items
    assert any(diet in m for m in seen["all"]) and any(diet_items[0] in m for m in seen["all"])
    assert seen["no-diet"] and not any(diet in m or any(i in m for i in diet_items) for m in seen["no-diet"])


def test_the_simulated_users_recipe_is_valid_and_its_ablations_match():
    from atelier.agents.judges.base import check_judge_fit, create_judge
    from atelier.graphs.context import check_hidden_facets
    from atelier.runs.folder.recipe import load_recipe

    recipe = load_recipe("runs/recipes/simulated_users.toml")
    cases = recipe.cases()
    check_hidden_facets(cases, recipe.systems)
    check_judge_fit(
        [create_judge(j) for j in recipe.judges], cases, recipe.benchmark.name, [s.name for s in recipe.systems]
    )
    assert recipe.user_sim.clarify and any(s.conversation for s in recipe.systems)
    assert any(s.hide.active for s in recipe.systems)
