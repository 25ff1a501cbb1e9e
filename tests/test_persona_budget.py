"""Issue 33, points 4 and 5: the explicit persona is never cut by a memory budget (first, whole,
counted in the budget); history the budget cuts is a counted `memory_budget_cut`; the context says
its budget and the share of the history it kept. And `runs/recipes/simulated_users.toml`: every
system in its persona setting sees the persona, and hiding a persona facet changes the context."""

from __future__ import annotations

from pathlib import Path

import pytest

from atelier.benchmarks.case import ExplicitPersona, MemorySnippet, ViewAblation
from atelier.benchmarks.registry import load_cases
from atelier.memory.base import MemoryEnv, memory_query
from atelier.memory.budget import count_tokens, pack_events, render_event
from atelier.memory.registry import create_backend
from atelier.runs.folder.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
SIMULATED_USERS = ROOT / "runs" / "recipes" / "simulated_users.toml"

PERSONA = ExplicitPersona(
    id="persona",
    attributes={
        "Basic Information": {"Name": "Ada", "Occupation": "nurse on night shifts"},
        "Preferences and Interests": {"Diet": "vegetarian, no nuts", "Travel": "trains over planes"},
    },
)
HISTORY = [
    MemorySnippet(id=f"m{i}", timestamp=f"2025-0{i}-01", text=f"note {i}: " + "about pensions and savings " * 8)
    for i in range(1, 7)
]


def tokens_of(*events) -> int:
    return count_tokens("\n".join(render_event(e) for e in events))


def test_a_budget_smaller_than_persona_and_history_keeps_the_whole_persona_first_and_counts_the_cut():
    persona_tokens = count_tokens(render_event(PERSONA))
    # room for the persona and two notes, each counted as `pack` counts it (its tokens and a newline)
    budget = persona_tokens + 1 + sum(count_tokens(render_event(e)) + 1 for e in HISTORY[:2])
    packed = pack_events([*HISTORY, PERSONA], budget)  # the persona comes last, as an undated event sorts
    assert packed.ids == ["persona", "m1", "m2"]
    assert packed.text.startswith(render_event(PERSONA) + "\n")
    assert packed.tokens <= budget and packed.cut == 4
    [cut] = packed.degraded("recall")
    assert (cut.kind, cut.step, cut.count) == ("memory_budget_cut", "recall", 4)
    assert "4 of 6 history events left out" in cut.detail and f"took {persona_tokens}" in cut.detail
    share = packed.share()
    assert share.budget_tokens == budget and share.events_offered == 7 and share.events_kept == 3
    assert share.persona_tokens == persona_tokens and share.tokens_kept == packed.tokens
    assert share.tokens_offered == tokens_of(PERSONA, *HISTORY) and 0 < share.share < 1 and share.over_budget == 0


def test_a_budget_too_small_for_the_persona_keeps_it_whole_over_budget_and_records_it():
    persona_tokens = count_tokens(render_event(PERSONA))
    packed = pack_events([PERSONA, *HISTORY], persona_tokens // 2)
    assert packed.ids == ["persona"] and packed.text == render_event(PERSONA)  # never cut
    [cut] = packed.degraded("recall")
    assert cut.count == 6 and "exceeds the" in cut.detail and "kept whole, over the budget" in cut.detail
    assert packed.share().over_budget == packed.tokens - persona_tokens // 2 > 0


def test_a_history_event_that_would_be_cut_short_beside_the_persona_is_left_out_and_counted():
    persona_tokens = count_tokens(render_event(PERSONA))
    packed = pack_events([PERSONA, *HISTORY], persona_tokens + 6)  # 5 tokens left: part of a note at most
    assert packed.ids == ["persona"] and packed.cut == 6


def test_without_a_persona_the_history_is_packed_as_before():
    budget = sum(count_tokens(render_event(e)) + 1 for e in HISTORY[:3])
    packed = pack_events(HISTORY, budget)
    assert packed.ids == ["m1", "m2", "m3"] and packed.persona_tokens == 0 and packed.cut == 3
    assert packed.degraded("recall")[0].detail == f"3 of 6 history events left out by the {budget}-token budget"
    assert pack_events(HISTORY, 100_000).degraded("recall") == []


def test_a_profiler_reads_the_whole_persona_first_whatever_its_budget():
    from atelier.memory.history_text import history_text

    persona_tokens = count_tokens(render_event(PERSONA))
    read = history_text([*HISTORY, PERSONA], persona_tokens + 40)
    assert read.event_ids[0] == "persona" and read.text.startswith(render_event(PERSONA))
    assert read.cut == len(HISTORY) - (len(read.event_ids) - 1) > 0
    [cut] = read.degraded("recall", "the profiler", persona_tokens + 40)
    assert cut.kind == "memory_budget_cut" and cut.count == read.cut


async def test_full_memory_puts_the_persona_first_and_reports_its_share():
    backend = create_backend({"backend": "full", "budget_tokens": count_tokens(render_event(PERSONA)) + 60})
    await backend.ingest("u", [PERSONA, *HISTORY])
    context = await backend.context("u", "pensions")
    assert context.event_ids[0] == "persona" and "Diet: vegetarian, no nuts" in context.text
    assert context.event_ids[1:] == ["m6"]  # then the most recent note that fits
    assert [(d.kind, d.count) for d in context.degraded] == [("memory_budget_cut", 5)]
    assert context.share is not None and context.share.events_kept == 2 and context.share.events_offered == 7


async def test_full_memory_with_room_for_everything_keeps_the_whole_context():
    backend = create_backend({"backend": "full", "budget_tokens": 100_000})
    await backend.ingest("u", [PERSONA, *HISTORY])
    context = await backend.context("u", "pensions")
    assert context.degraded == [] and context.share is not None and context.share.share == 1.0
    assert len(context.event_ids) == 7


# ----------------------------------------------------------------------------- simulated_users.toml


async def system_context(system, case, hide: ViewAblation | None = None):
    view = case.view(system.setting, hide=hide if hide is not None else system.hide)
    backend = create_backend(system.memory, MemoryEnv())
    await backend.ingest(view.user_id, view.history)
    return await backend.context(view.user_id, memory_query(view))


@pytest.fixture(scope="module")
def simulated_users():
    recipe = load_recipe(SIMULATED_USERS)
    return recipe, recipe.with_overrides(limit=1).cases()


async def test_every_system_of_the_simulated_users_recipe_sees_the_persona(simulated_users):
    recipe, [case] = simulated_users
    assert recipe.benchmark.setting == "persona+context" and case.persona is not None
    for system in recipe.systems:
        view = case.view(system.setting, hide=system.hide)
        persona = next(e for e in view.history if e.kind == "persona")
        context = await system_context(system, case)
        assert context.event_ids[0] == persona.id, system.name
        assert context.text.startswith(render_event(persona)), system.name
        assert context.share is not None and context.share.persona_tokens > 0


async def test_hiding_a_persona_facet_changes_the_context_in_the_simulated_users_recipe(simulated_users):
    recipe, [case] = simulated_users
    plain = next(s for s in recipe.systems if s.name == "direct-full")
    hiding = next(s for s in recipe.systems if s.name == "direct-no-preferences")
    assert not plain.hide.active and hiding.hide.facets == ["Preferences and Interests"]
    shown = await system_context(plain, case)
    hidden = await system_context(hiding, case)
    assert "Preferences and Interests" in shown.text
    assert "Preferences and Interests" not in hidden.text
    assert hidden.text != shown.text
    # and the same system with nothing hidden is the plain one's context: the hiding made the difference
    assert (await system_context(hiding, case, ViewAblation())).text == shown.text


def test_the_bundled_sample_personas_fit_the_recipes_budget():
    """The recipe's 1500-token budget keeps every sample persona whole and within the budget."""
    recipe = load_recipe(SIMULATED_USERS)
    budget = recipe.systems[0].memory["budget_tokens"]
    for case in load_cases("sample", setting="persona+context"):
        persona = next(e for e in case.view().history if e.kind == "persona")
        assert count_tokens(render_event(persona)) < budget, case.id


# ----------------------------------------------------------------------------- PDR Tables 1-3

PAPERS = ROOT / "runs" / "recipes" / "papers"
PDR_CONTEXTS = ROOT / "tests" / "fixtures" / "pdr_contexts" / "contexts_en.jsonl"


def system_named(recipe, name):
    return next(s for s in recipe.systems if s.name == name)


async def test_pdr_table2_with_context_gets_the_whole_synthesized_context():
    recipe = load_recipe(PAPERS / "pdr_table2_settings.toml")
    system = system_named(recipe, "with_context")
    # a synthesized PDR context is ~7.4k tokens a user: 60 notes of ~125 tokens
    notes = [
        MemorySnippet(
            id=f"n{i}", timestamp=f"2025-01-{1 + i % 28:02d}", text=f"note {i}: " + "I save for a house " * 25
        )
        for i in range(60)
    ]
    assert tokens_of(*notes) > 7_000
    backend = create_backend(system.memory, MemoryEnv())
    await backend.ingest("u", notes)
    context = await backend.context("u", "a savings plan")
    assert context.degraded == [] and context.share is not None and context.share.share == 1.0
    assert len(context.event_ids) == 60
    # the 2000-token default kept about a quarter of it, and said so only as a degradation
    default = create_backend({"backend": "full"}, MemoryEnv())
    await default.ingest("u", notes)
    cut = await default.context("u", "a savings plan")
    assert cut.share is not None and cut.share.share < 0.3 and cut.degraded[0].kind == "memory_budget_cut"
    # and on the bundled synthesized contexts, every user's whole context
    cases = load_cases("pdr", split="all", setting="context", options={"contexts_file": str(PDR_CONTEXTS)})
    for case in {c.user_id: c for c in cases if c.history}.values():
        context = await system_context(system, case)
        assert context.degraded == [] and context.share is not None and context.share.share == 1.0, case.user_id


@pytest.mark.parametrize(
    ("recipe", "systems"),
    [
        ("pdr_table1_systems.toml", ["deep_research", "llm_search"]),
        ("pdr_table2_settings.toml", ["with_persona"]),
        ("pdr_table3_memory.toml", ["with_persona"]),
    ],
)
async def test_pdr_persona_systems_get_every_facet_of_every_persona(recipe, systems):
    loaded = load_recipe(PAPERS / recipe)
    cases = {c.user_id: c for c in load_cases("pdr", split="all", setting="persona")}
    for name in systems:
        system = system_named(loaded, name)
        for case in cases.values():
            context = await system_context(system, case)
            assert context.degraded == [], (name, case.user_id)


def test_pdr_table3_states_each_memory_systems_budget():
    recipe = load_recipe(PAPERS / "pdr_table3_memory.toml")
    text = (PAPERS / "pdr_table3_memory.toml").read_text()
    for system in recipe.systems:
        if system.memory["backend"] in ("mem0", "hierarchical", "persona_model", "persona"):
            assert f'backend = "{system.memory["backend"]}", budget_tokens = ' in text, system.name
