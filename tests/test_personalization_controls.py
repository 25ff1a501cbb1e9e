"""Personalization you can prove (issue 54): counterfactual controls (swapped, no_context,
shuffled_history) run as ordinary episodes beside each system, the personalization effect (own minus
control, paired by case, clustered) in summary.json, the report, `compare`, the Python API and
`plan`, and the `context_leak` check that controls make possible."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atelier.benchmarks.case import Case, ChatMessage, ChatSession, MemorySnippet, Persona, Query
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.controls import (
    ControlPlan,
    NoDerangement,
    derangement,
    shuffled_events,
    swap_donors,
)
from atelier.benchmarks.metrics.leakage import FactIndex, leaks, specific_phrases
from atelier.benchmarks.registry import load_cases
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe, parse_recipe
from atelier.runs.folder.results import ResultRecord, ResultsFile, result_key
from atelier.runs.folder.resume import check_resume
from atelier.runs.reading.personalization import effects, responding
from atelier.runs.reading.run_handle import open_run
from tests.test_report import render, table
from tests.test_run_signals import SLOW_MODEL, lines, start, wait_for_results

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "runs" / "recipes" / "personalization_controls.toml"
SHIPPED_PDR = ROOT / "runs" / "recipes" / "personalization_controls_pdr.toml"
PDR_CONTEXTS = ROOT / "tests" / "fixtures" / "pdr_contexts" / "contexts_en.jsonl"
DOUBLES = "tests.personalization_doubles"
JUDGE = f"{DOUBLES}:FacetOverlap"


def sample_cases() -> list[Case]:
    return load_cases("sample", "all")


# ----------------------------------------------------------------------------- the derangement


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=14), seed=st.integers(0, 10**6))
def test_a_derangement_maps_no_item_into_its_own_group_or_says_none_exists(groups, seed):
    items = [f"i{n}" for n in range(len(groups))]
    group = dict(zip(items, groups))
    largest = max(Counter(groups).values(), default=0)
    if len(items) < 2 or 2 * largest > len(items):
        with pytest.raises(NoDerangement):
            derangement(items, group, str(seed))
        return
    image = derangement(items, group, str(seed))
    assert sorted(image) == sorted(items) and sorted(image.values()) == sorted(items)  # a permutation
    assert all(group[a] != group[b] for a, b in image.items())  # never within a group (so never a fixed point)
    assert image == derangement(items, group, str(seed))  # seeded


def test_the_constructive_derangement_serves_groups_of_exactly_half():
    # two groups of five: a uniform draw rarely succeeds, the laid-out shift always does
    items = [f"u{n}" for n in range(10)]
    group = {item: int(item[1:]) % 2 for item in items}
    for seed in range(20):
        image = derangement(items, group, str(seed))
        assert all(group[a] != group[b] for a, b in image.items())


def case(user: str, cid: str, persona: dict | None, history=(), task: str | None = None) -> Case:
    return Case(
        id=cid,
        benchmark="t",
        user_id=user,
        query=Query(text=f"question {cid}"),
        task_id=task,
        history=list(history),
        persona=Persona(user_id=user, attributes=persona) if persona is not None else None,
    )


def test_one_user_has_no_swapped_control_and_it_says_so():
    with pytest.raises(NoDerangement, match=r"swapped control needs two or more users .* there is 1 \(u1\)"):
        swap_donors([case("u1", "a", {"Age": "30"})], 0)


def test_users_with_the_same_persona_are_never_swapped_for_each_other():
    twins = {"Basic": {"Occupation": "nurse", "Home": "Leeds"}}
    cases = [
        case(u, f"c{u}", twins if u in ("u1", "u2") else {"Basic": {"Occupation": u}}) for u in "u1 u2 u3 u4".split()
    ]
    for seed in range(40):
        donors = swap_donors(cases, seed)
        assert donors["u1"] != "u2" and donors["u2"] != "u1" and all(a != b for a, b in donors.items())
    alike = [case(u, f"c{u}", twins) for u in ("u1", "u2", "u3")] + [case("u4", "c4", {"Basic": {"Occupation": "x"}})]
    with pytest.raises(NoDerangement, match="3 of the 4 users are alike"):
        swap_donors(alike, 0)


def test_the_swapped_donor_answers_the_same_task_when_it_has_one():
    cases = sample_cases()
    plan = ControlPlan(cases, 0)
    for c in cases:
        view = plan.view(c.view("context"), c, "swapped")
        donor_user = plan.donors[c.user_id]
        assert view.user_id == donor_user != c.user_id and view.query == c.query
        assert view.history and all(e.id.startswith(f"{donor_user}:") for e in view.history)
        same_task = [d for d in plan.users[donor_user] if d.task_id == c.task_id]
        donor = same_task[0] if same_task else plan.users[donor_user][0]
        assert [e.id for e in view.history] == [e.id for e in donor.view("context").history]
    persona_view = plan.view(cases[0].view("persona"), cases[0], "swapped")
    assert persona_view.history[0].kind == "persona" and persona_view.history[0].id.startswith(
        plan.donors[cases[0].user_id]
    )
    assert plan.view(cases[0].view("context"), cases[0], "no_context").history == []


def test_shuffled_history_keeps_each_event_its_id_and_time_with_another_users_content():
    cases = sample_cases()
    stand_ins = shuffled_events(cases, 0)
    originals = {(c.user_id, e.id): e for c in cases for e in c.history}
    assert set(stand_ins) == set(originals)
    contents = Counter()
    for (user, event_id), stand_in in stand_ins.items():
        own = originals[(user, event_id)]
        assert (stand_in.id, stand_in.timestamp, stand_in.kind) == (own.id, own.timestamp, own.kind)
        source = next(k for k, e in originals.items() if e.kind == own.kind and e.render() == stand_in.render())
        assert source[0] != user  # another user's content
        contents[source] += 1
    assert set(contents.values()) == {1}  # each other event used once: a shuffle, not draws
    tiny = load_cases("tiny", "all")  # u1 holds 2 of the 3 memory snippets: no shuffle keeps them apart
    with pytest.raises(NoDerangement, match="shuffled_history control cannot shuffle the chat_session events"):
        shuffled_events(tiny, 0)


# ----------------------------------------------------------------------------- the leak check


def test_a_fact_of_the_own_user_in_a_controls_answer_is_caught_and_generic_words_are_not():
    cases = {c.user_id: c for c in sample_cases()}
    index = FactIndex(sample_cases())
    u1 = cases["u1"]
    family = dict(u1.persona.facets())["Basic Attributes > Family Status > Family Members and Relationships"]
    planted = f"Some advice. Also, {family}"
    found = leaks(index, "u1", planted, given=[u1.query.text])
    assert found and found[0].source == "persona: Basic Attributes > Family Status > Family Members and Relationships"
    # what the control was given is no leak: the same sentence in its context, or in a cited source
    assert leaks(index, "u1", planted, given=[u1.query.text, f"note: {family}"]) == []
    # generic advice, the donor's facts and the query echoed are no leak either
    donor = cases["u4"]
    generic = (
        "Here are a few tips. Set a monthly budget, keep an emergency fund, compare prices every week, "
        "read the reviews first and think about it for two years. Personal finance matters; "
        f"{u1.query.text} " + " ".join(v for _, v in donor.persona.facets()[:12])
    )
    assert leaks(index, "u1", generic, given=[u1.query.text]) == []
    # one word is never a fact; a phrase two users share says nothing about which of them is meant
    assert not specific_phrases("Manchester") and not specific_phrases("every day")
    shared = [
        case("a", "ca", {"Diet": "Strict vegan since 2019 in Bristol"}),
        case("b", "cb", {"Diet": "Strict vegan since 2019 in Bristol"}),
    ]
    assert leaks(FactIndex(shared), "a", "You have been a strict vegan since 2019 in Bristol.", given=[]) == []


SAMPLE_INDEX = FactIndex(load_cases("sample", "all"))
SAMPLE_USERS = sorted(SAMPLE_INDEX.facts)


@settings(max_examples=60, deadline=None)
@given(
    user=st.sampled_from(SAMPLE_USERS),
    other=st.sampled_from(SAMPLE_USERS),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=6),
    planted=st.integers(0, 10**6),
)
def test_another_users_facts_never_leak_and_one_own_phrase_among_them_always_does(user, other, picks, planted):
    if user == other:
        return
    theirs = [fact.text for fact, _ in SAMPLE_INDEX.own_phrases(other)]
    answer = ". ".join(theirs[i % len(theirs)] for i in picks)  # a control answering from the donor's context
    assert leaks(SAMPLE_INDEX, user, answer, given=[]) == []
    own = [(fact, sorted(phrases)) for fact, phrases in SAMPLE_INDEX.own_phrases(user) if phrases]
    fact, phrases = own[planted % len(own)]
    phrase = phrases[planted % len(phrases)]
    caught = leaks(SAMPLE_INDEX, user, f"{answer}. {phrase}.", given=[])
    assert fact.source in [leak.source for leak in caught]
    assert leaks(SAMPLE_INDEX, user, f"{answer}. {phrase}.", given=[f"You said: {phrase}."]) == []  # it was given


def test_the_users_own_turns_are_facts_and_the_assistants_are_not():
    history = [
        ChatSession(
            id="u9:c1",
            messages=[
                ChatMessage(role="user", content="My daughter Amira starts school at Greenfield Primary in May."),
                ChatMessage(role="assistant", content="Consider Practical Guides From The Council Website today."),
            ],
        ),
        MemorySnippet(id="u9:m1", text="Paid £1,240 for the Lisbon flights."),
    ]
    index = FactIndex([case("u9", "c9", None, history), case("u8", "c8", None, [MemorySnippet(id="u8:m", text="x y")])])
    caught = leaks(index, "u9", "Good luck to Amira at Greenfield Primary! The Lisbon flights (£1,240) ...", given=[])
    assert [leak.source for leak in caught] == ["history: u9:c1", "history: u9:m1"]
    assert leaks(index, "u9", "Consider practical guides from the council website.", given=[]) == []


# ----------------------------------------------------------------------------- the effect's math


def record(case_id: str, system: str, control: str | None, score: float, user: str = "u") -> ResultRecord:
    from atelier.agents.judges.base import JudgeResult

    return ResultRecord(
        key=result_key(case_id, system, 1, control),
        run_id="r",
        case_id=case_id,
        system=system,
        benchmark="b",
        user_id=user,
        setting="context",
        control=control,
        status="ok",
        judgments=[JudgeResult(judge="j", score=score, criteria={"c": score / 2})],
        scores={"j": score},
    )


def test_the_effect_is_own_minus_control_paired_by_case_and_an_ignored_context_covers_zero():
    import random

    rng = random.Random(7)
    own = {f"c{i}": rng.random() for i in range(40)}
    records = [record(c, "s", None, v) for c, v in own.items()]
    records += [record(c, "s", "swapped", v - 0.3) for c, v in own.items()]  # the user's context is worth 0.3
    records += [record(c, "s", "no_context", v + rng.gauss(0, 0.05)) for c, v in own.items()]  # nothing
    rows = {(r["criterion"], r["control"]): r for r in effects(records, {"s": ["swapped", "no_context"]}, ["j"])}
    swapped, none = rows[(None, "swapped")], rows[(None, "no_context")]
    assert swapped["mean_difference"] == pytest.approx(0.3) and swapped["ci_low"] > 0.29
    assert none["ci_low"] < 0 < none["ci_high"]
    assert rows[("c", "swapped")]["mean_difference"] == pytest.approx(0.15)  # per criterion too
    verdicts = {(r["criterion"]): r for r in responding(list(rows.values()))}
    assert verdicts[None]["responds"] and verdicts[None]["to"] == ["swapped"]


# ----------------------------------------------------------------------------- recipes


def doubles_recipe(tmp_path, *, systems=("echo", "generic"), controls=("swapped", "no_context"), limit=None, **run):
    pipelines = {"echo": "facet_echo", "generic": "generic", "leaky": "leaky"}
    return parse_recipe(
        {
            "name": "pz",
            "benchmark": {
                "name": "sample",
                "split": "all",
                "setting": "persona",
                **({"limit": limit} if limit else {}),
            },
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                {
                    "name": name,
                    "pipeline": f"{DOUBLES}:{pipelines[name]}",
                    "memory": {"backend": "full", "budget_tokens": 8000},
                }
                for name in systems
            ],
            "judges": [{"name": JUDGE}],
            "run": {"controls": list(controls), "out_dir": str(tmp_path / "out"), **run},
        }
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"benchmark": {"name": "sample", "setting": "task_only"}}, "shows it no user context"),
        ({"run": {"controls": ["shuffled_history"]}}, "shuffled_history changes the implicit history"),
        ({"run": {"controls": ["swapped", "swapped"]}}, "swapped given twice"),
        ({"extra_system": "direct~swapped"}, "the name 'direct''s control runs under"),
        ({"run": {"controls": ["mirrored"]}}, "run.controls"),
    ],
)
def test_controls_that_cannot_measure_anything_are_refused_naming_the_key(change, message):
    data = {
        "name": "x",
        "benchmark": {"name": "sample", "setting": "persona"},
        "systems": [{"name": "direct", "memory": {"backend": "full"}}],
        "run": {"controls": ["swapped"]},
    }
    if "extra_system" in change:
        data["systems"].append({"name": change["extra_system"], "memory": {"backend": "none"}})
    else:
        data.update(change)
    with pytest.raises(ConfigError, match=message):
        parse_recipe(data, source="r.toml")


def test_a_system_may_opt_out_and_a_task_only_system_must():
    def recipe(plain: dict) -> dict:
        return {
            "name": "x",
            "benchmark": {"name": "sample", "setting": "context"},
            "systems": [
                {"name": "plain", "setting": "task_only", "memory": {"backend": "none"}, **plain},
                {"name": "full", "memory": {"backend": "full"}},
            ],
            "run": {"controls": ["swapped", "no_context"]},
        }

    assert [s.controls for s in parse_recipe(recipe({"controls": []})).systems] == [[], None]
    with pytest.raises(ConfigError, match=r"run.controls: system 'plain' runs with setting 'task_only'"):
        parse_recipe(recipe({}))


def test_adding_controls_to_a_run_folder_keeps_its_outputs():
    base = doubles_recipe(Path("/nonexistent"), controls=()).model_dump(mode="json")
    more = json.loads(json.dumps(base))
    more["run"]["controls"] = ["swapped"]
    more["systems"][0]["controls"] = ["no_context"]
    check = check_resume(base, more)
    assert check.refused == [] and not check.judgments_changed


def test_a_key_naming_another_control_is_refused_naming_its_line(tmp_path):
    good = record("q1", "s", "swapped", 0.5)
    path = tmp_path / "results.jsonl"
    path.write_text(good.model_dump_json() + "\n" + good.model_copy(update={"control": "no_context"}).model_dump_json())
    assert result_key("q1", "s", 2, "swapped") == "q1::s::control=swapped::epoch2"
    with pytest.raises(DataError, match=r"results.jsonl:2 field 'key'.*is not its case, system and epoch"):
        ResultsFile(path).load()


def test_a_benchmark_of_one_user_refuses_the_swapped_control_before_any_episode(tmp_path, cache_dir):
    cases = tmp_path / "cases.jsonl"
    rows = [case("solo", f"s{i}", {"Age": "40"}, [MemorySnippet(id=f"solo:m{i}", text="hello")]) for i in range(2)]
    cases.write_text("".join(c.model_dump_json() + "\n" for c in rows))
    recipe = parse_recipe(
        {
            "name": "solo",
            "benchmark": {"path": str(cases)},
            "systems": [{"name": "direct-full", "memory": {"backend": "full"}}],
            "run": {"controls": ["swapped"], "out_dir": str(tmp_path / "out")},
        }
    )
    with pytest.raises(ConfigError, match=r"\[run\] controls: the swapped control needs two or more users.*solo"):
        run_recipe(recipe, progress=False)
    assert not list((tmp_path / "out").glob("*/results.jsonl"))


# ----------------------------------------------------------------------------- runs


def test_a_system_copying_the_persona_has_an_effect_above_zero_and_one_ignoring_it_covers_zero(tmp_path, cache_dir):
    folder = run_recipe(doubles_recipe(tmp_path), progress=False)
    results = [json.loads(line) for line in folder.results.read_text().splitlines()]
    assert len(results) == 21 * 2 * 3 and Counter(r["control"] for r in results) == {
        None: 42,
        "swapped": 42,
        "no_context": 42,
    }
    summary = json.loads(folder.summary.read_text())
    assert summary["episodes"]["expected"] == 126 and summary["episodes"]["scored"] == 126
    own = [r["scores"][JUDGE] for r in results if r["system"] == "echo" and r["control"] is None]
    assert summary["systems"]["echo"]["judges"][JUDGE]["n"] == 21  # the controls are in no mean
    assert summary["systems"]["echo"]["judges"][JUDGE]["mean"] == pytest.approx(sum(own) / 21)

    p = summary["personalization"]
    rows = {(e["system"], e["criterion"], e["control"]): e for e in p["effects"]}
    for control in ("swapped", "no_context"):
        echo = rows[("echo", None, control)]
        assert echo["n"] == 21 and echo["mean_difference"] > 0.5 and echo["ci_low"] > 0
        assert echo["ci_method"] == "sign-flip test over clusters: user (6); interval by inverting it"  # the run's
        generic = rows[("generic", None, control)]
        assert generic["ci_low"] <= 0 <= generic["ci_high"]
        assert rows[("echo", "overlap", control)]["mean_difference"] == pytest.approx(1.0)
    verdict = {(r["system"], r["criterion"]): r["responds"] for r in p["responding"]}
    assert verdict == {
        ("echo", None): True,
        ("echo", "overlap"): True,
        ("generic", None): False,
        ("generic", "overlap"): False,
    }
    donors = json.loads(folder.config.read_text())["controls"]["swapped_donors"]
    assert p["swapped_donors"] == donors and set(donors) == {f"u{i}" for i in range(1, 7)}
    swapped = [r for r in results if r["control"] == "swapped" and r["system"] == "echo"]
    assert all(r["user_context"]["event_ids"][0].startswith(donors[r["user_id"]]) for r in swapped)
    # each control has memory stores of its own: the user's real state never mixes with a control's
    assert {p.name for p in (folder.path / "memory").iterdir()} >= {"echo", "echo~swapped", "echo~no_context"}

    doc = render(folder.report)  # the page as a browser shows it: the section agrees with summary.json
    shown = table(doc, "personalization-effects")
    assert len(shown) == len(p["effects"]) == 8
    for row, effect in zip(shown, p["effects"]):
        criterion = effect["criterion"] or "score"
        assert row[:5] == [effect["system"], effect["judge"], criterion, effect["control"], str(effect["n"])]
        assert row[7] == f"{effect['mean_difference']:+.3f}"
    assert doc.xpath('//div[@id="personalization-chart"]//*[local-name()="svg"]')
    verdicts = [" ".join(li.text_content().split()) for li in doc.xpath('//ul[@id="responding"]/li')]
    assert sum("responds to the user" in v for v in verdicts) == 2 and sum("no response" in v for v in verdicts) == 2

    run = open_run(folder.path)
    assert len(run.results) == 42 and all(r.control is None for r in run.results)
    assert len(run.control_results) == 84 and run.effects == p["effects"]


def test_a_planted_leak_is_caught_as_a_degradation_of_the_control_only(tmp_path, cache_dir):
    from atelier.runs.reading.finish import folder_outcome

    folder = run_recipe(doubles_recipe(tmp_path, systems=("leaky",), limit=6), progress=False)
    results = [json.loads(line) for line in folder.results.read_text().splitlines()]
    kinds = {(r["case_id"], r["control"]): [d["kind"] for d in r["degraded"]] for r in results}
    assert all(kinds[(c, None)] == [] for c, control in kinds if control is None)  # its own context: no leak
    leaked = [r for r in results if r["control"] is not None]
    assert leaked and all("context_leak" in [d["kind"] for d in r["degraded"]] for r in leaked)
    detail = next(d["detail"] for d in leaked[0]["degraded"] if d["kind"] == "context_leak")
    assert "Family Members and Relationships" in detail
    summary = json.loads(folder.summary.read_text())
    episodes = summary["personalization"]["episodes"]["leaky"]
    assert episodes["swapped"]["leaked_episodes"] == episodes["swapped"]["n"] == 6
    outcome = folder_outcome(folder, json.loads(folder.config.read_text()))
    assert outcome.degraded["context_leak"] >= 12 and outcome.exit_code == 3  # a leak fails the run


def test_a_resumed_run_with_controls_loses_nothing_and_doubles_nothing(tmp_path, cache_dir):
    recipe = doubles_recipe(tmp_path, controls=("swapped", "no_context"), limit=4)
    folder = run_recipe(recipe, progress=False)
    complete = {r["key"]: r["scores"] for r in map(json.loads, folder.results.read_text().splitlines())}
    kept = folder.results.read_text().splitlines()[:5]
    folder.results.write_text("\n".join(kept) + "\n" + kept[0][:40])  # five results and a torn line
    resumed = run_recipe(recipe, folder.path, progress=False)
    after = [json.loads(line) for line in resumed.results.read_text().splitlines()]
    assert Counter(r["key"] for r in after) == Counter(set(complete))  # each key exactly once
    assert {r["key"]: r["scores"] for r in after} == complete
    assert any("::control=" in key for key in complete)


def test_the_forecast_and_the_plan_count_the_controls(tmp_path, cache_dir):
    from atelier.runs.execution.cost import forecast
    from atelier.runs.execution.runner import dry_run_ledger
    from atelier.runs.studies.plan import plan_run

    recipe = doubles_recipe(tmp_path, systems=("echo",), limit=4)
    predicted = forecast(recipe, run=dry_run_ledger)
    assert predicted.episodes == 4 * 3 and set(predicted.per_episode_usd_high) == {
        "echo",
        "echo~swapped",
        "echo~no_context",
    }
    folder = run_recipe(recipe, progress=False)
    plan = plan_run(folder.path, 0.2)
    pairs = {(c.a, c.b) for c in plan.comparisons}
    assert pairs == {("echo", "echo~swapped"), ("echo", "echo~no_context")}
    swapped = next(c for c in plan.comparisons if c.b == "echo~swapped" and c.judge == JUDGE)
    assert swapped.pilot["cases"] == 4 and swapped.pilot["mean_difference"] > 0.5
    assert any(note.startswith("control swapped of echo adds per case") for note in plan.notes)


def test_compare_sets_the_runs_effects_side_by_side_and_tests_one_against_another(tmp_path, cache_dir):
    from atelier.runs.reading.compare import compare_runs, write_comparison_html

    # every case: the sample's 6 users, so that the user-clustered test can reject at 5% (6 cases hold
    # at most 5 users: the smallest sign-flip p is then 2/32 = 0.0625, every interval unbounded)
    echo = run_recipe(doubles_recipe(tmp_path, systems=("echo",)), progress=False)
    generic = run_recipe(doubles_recipe(tmp_path, systems=("generic",)), progress=False)
    comparison = compare_runs([echo.path, generic.path])
    assert all(e["n"] == 21 for e in comparison["entries"])  # controls are in no entry
    effects_ = {(row["entry"].split(":")[1], row["control"]) for row in comparison["personalization"]["effects"]}
    assert effects_ == {("echo", "swapped"), ("echo", "no_context"), ("generic", "swapped"), ("generic", "no_context")}
    versus = comparison["personalization"]["versus_baseline"]
    assert {row["control"] for row in versus} == {"swapped", "no_context"}
    assert all(row["mean_difference"] < -0.5 and row["ci_high"] < 0 for row in versus)  # generic personalizes less
    write_comparison_html(comparison, tmp_path / "compare.html")
    doc = render(tmp_path / "compare.html")
    assert len(table(doc, "personalization-effects")) == 4 and len(table(doc, "personalization-versus")) == 2


# ----------------------------------------------------------------------------- the shipped recipes


def test_the_shipped_recipes_run_controls_beside_every_system():
    sample, pdr = load_recipe(SHIPPED), load_recipe(SHIPPED_PDR)
    assert sample.run.controls == pdr.run.controls == ["swapped", "no_context"]
    assert [s.name for s in sample.systems] == [s.name for s in pdr.systems]
    assert (pdr.benchmark.name, pdr.benchmark.setting) == ("pdr", "context") and pdr.judges[0]["axes"] == ["P"]


def test_the_pdr_variant_runs_on_synthesized_contexts_with_persona_by_task_clusters(tmp_path, cache_dir):
    text = SHIPPED_PDR.read_text().replace(
        'options = { contexts_file = "runs/out/pdr-contexts/contexts_en.jsonl" }',
        f'options = {{ contexts_file = "{PDR_CONTEXTS}" }}',
    )
    assert str(PDR_CONTEXTS) in text
    recipe_file = tmp_path / "pdr.toml"
    recipe_file.write_text(text)
    recipe = load_recipe(recipe_file).with_overrides(
        limit=3, systems=["direct-none", "direct-full"], out_dir=str(tmp_path)
    )
    folder = run_recipe(recipe, progress=False)
    summary = json.loads(folder.summary.read_text())
    assert summary["episodes"]["scored"] == summary["episodes"]["expected"] == 3 * 2 * 3
    rows = summary["personalization"]["effects"]
    assert {r["criterion"] for r in rows} >= {None, "P", "GOAL", "CONT", "PRES", "ACTI"}
    assert all(r["mean_difference"] == 0 for r in rows if r["system"] == "direct-none")  # no memory: nothing to swap


@pytest.mark.battery
def test_a_killed_run_with_controls_resumes_to_exactly_the_uninterrupted_results(tmp_path):
    def args(out: Path) -> list[str]:
        return ["run", str(SHIPPED), "--model", SLOW_MODEL, "--limit", "3", "--concurrency", "2", "--no-progress",
                "--out", str(out)]  # fmt: skip

    whole = start(args(tmp_path / "whole"), tmp_path / "cache-whole")
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 0, err
    killed = start(args(tmp_path / "run"), tmp_path / "cache")
    wait_for_results(tmp_path / "run", 12, killed, timeout=300)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert len(lines(tmp_path / "run" / "results.jsonl")) < 3 * 3 * 3 + 3  # it really stopped midway
    resumed = start(args(tmp_path / "run"), tmp_path / "cache")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert "episodes already done" in err

    def scores(folder: Path) -> dict[str, dict]:
        return {r["key"]: r["scores"] for r in lines(folder / "results.jsonl")}

    written = Counter(r["key"] for r in lines(tmp_path / "run" / "results.jsonl"))
    assert set(written.values()) == {1}  # nothing run twice, nothing lost
    assert scores(tmp_path / "run") == scores(tmp_path / "whole")
    assert sum("::control=" in key for key in written) == 3 * (2 + 2 + 3)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    whole_summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["personalization"]["effects"] == whole_summary["personalization"]["effects"]


def test_view_and_trace_open_a_control_episode_beside_the_systems_own(tmp_path, cache_dir):
    """A leak is found where a researcher looks for it: `atelier view` lists each control episode
    (marked, filterable) with its own model calls, and `atelier trace --control` steps through it."""
    from atelier.runs.reading.trace import load_trace
    from atelier.runs.reading.view import write_static
    from tests.test_view import render, text

    plain = doubles_recipe(tmp_path, systems=("leaky",), limit=2).model_dump(mode="json")
    plain["systems"].append(
        {"name": "direct", "pipeline": "direct", "memory": {"backend": "full", "budget_tokens": 8000}}
    )
    folder = run_recipe(parse_recipe(plain), progress=False)
    case_ids = json.loads(folder.config.read_text())["cases"]
    index = write_static(folder.path, tmp_path / "view")
    doc = render(index.as_uri())
    rows = doc.xpath('//tr[@class="episode"]')
    listed = [(tr.get("data-case"), tr.get("data-system"), tr.get("data-control")) for tr in rows]
    own = [(c, s, "") for c in case_ids for s in ("leaky", "direct")]
    controls = [(c, s, k) for s in ("leaky", "direct") for k in ("swapped", "no_context") for c in case_ids]
    assert listed == own + controls
    leaked = [tr for tr in rows if tr.get("data-system") == "leaky" and tr.get("data-control") == "swapped"]
    assert len(leaked) == 2 and all("context_leak" in tr.get("data-degraded") for tr in leaked)
    calls = {(tr.get("data-case"), tr.get("data-system"), tr.get("data-control")): int(text(tr.xpath("./td")[-2]))
             for tr in rows}  # fmt: skip
    assert all(calls[(c, "direct", k)] > 0 for c in case_ids for k in ("", "swapped", "no_context"))

    def shown(query: str) -> list[str | None]:
        return [tr.get("data-control") for tr in render(index.as_uri() + query).xpath('//tr[@class="episode"]')
                if tr.get("hidden") is None]  # fmt: skip

    assert shown("?control=swapped") == ["swapped"] * 4 and shown("?control=own&system=direct") == [""] * 2

    [link] = [tr for tr in rows if tr.get("data-system") == "direct" and tr.get("data-control") == "swapped"][0].xpath(
        "./td/a/@href"
    )
    episode = render((tmp_path / "view" / link).as_uri())
    assert text(episode.xpath('//*[@id="control"]')[0]) == "swapped"
    assert len(episode.xpath('//div[starts-with(@id, "call-")]')) == calls[(case_ids[0], "direct", "swapped")]

    mine, control = (load_trace(folder.path, case_ids[0], "direct", 1, kind) for kind in (None, "swapped"))
    mine_calls = {c.entry.call_id for s in mine for c in s.calls}
    control_calls = {c.entry.call_id for s in control for c in s.calls}
    assert mine_calls and control_calls and not mine_calls & control_calls  # each its own calls
    with pytest.raises(ConfigError, match=r"--control 'shuffled_history': system 'direct' ran no such control"):
        load_trace(folder.path, case_ids[0], "direct", 1, "shuffled_history")
