"""The simulated user's gold guard: no gold text leaves it verbatim, whatever the model wrote."""

from __future__ import annotations

from atelier.agents.user_sim.disclosure import ELLIPSIS, GoldGuard, gold_strings
from atelier.benchmarks.case import Case, Gold, MemorySnippet, Persona, Query, RJPair, RubricAspect

NEED = "Priya wants the cheapest sensible way to get from Lisbon to Porto and a hostel under 38 euros a night."


def make_case() -> Case:
    return Case(
        id="c1",
        benchmark="t",
        user_id="u1",
        query=Query(text="Plan a week in Portugal for me."),
        persona=Persona(user_id="u1", attributes={"Lifestyle": {"Diet": "Vegetarian, avoids fish in soups"}}),
        history=[MemorySnippet(id="u1:m1", text="Trying to keep everything else under 70 euros a day.")],
        gold=Gold(
            information_need=NEED,
            rubric_aspects=[
                RubricAspect(aspect="Daily budget", reason="r", evidence="keep everything else under 70 euros a day")
            ],
            rj_pairs=[RJPair(response="GOLD-ONLY-c0ffee response", score=3)],
            claim_sources={"Trains take 3 hours": ["page-1"]},
        ),
    )


def test_gold_strings_walks_every_field_and_key():
    strings = gold_strings(make_case().gold)
    assert NEED in strings and "GOLD-ONLY-c0ffee response" in strings
    assert "Trains take 3 hours" in strings and "page-1" in strings  # keys and values of maps


def test_a_long_verbatim_run_of_gold_is_cut_and_counted():
    guard = GoldGuard(make_case())
    out = guard.scrub("Well, I want the cheapest sensible way to get from Lisbon to Porto, that's all.")
    assert "cheapest sensible way to get from Lisbon" not in out.text
    assert out.text.startswith("Well, I want ") and ELLIPSIS in out.text and out.redacted == 1


def test_paraphrase_and_short_overlaps_pass_untouched():
    guard = GoldGuard(make_case())
    text = "Mostly I care about a cheap train between Lisbon and Porto, and a clean hostel."
    assert guard.scrub(text).text == text and guard.scrub(text).redacted == 0


def test_gold_runs_that_the_user_shares_anyway_are_allowed():
    # rubric evidence quotes the history: repeating one's own history is not a gold leak
    guard = GoldGuard(make_case())
    text = "As I noted, I keep everything else under 70 euros a day."
    assert guard.scrub(text).text == text


def test_a_gold_only_figure_or_code_is_cut_even_alone():
    guard = GoldGuard(make_case())
    out = guard.scrub("Something like 38 per night. Also GOLD-ONLY-c0ffee maybe.")
    assert "38" not in out.text and "GOLD-ONLY-c0ffee" not in out.text and out.redacted == 2
    # a figure the user's own history holds is theirs to say
    assert guard.scrub("about 70 a day").text == "about 70 a day"
    # ... and so is one the system itself just asked about
    assert guard.scrub("yes, 38", also_shared=["Is 38 a night your limit?"]).text == "yes, 38"


def test_chinese_text_is_guarded_character_by_character():
    case = make_case().model_copy(update={"gold": Gold(information_need="我想找到从里斯本到波尔图最便宜的交通方式")})
    guard = GoldGuard(case)
    out = guard.scrub("嗯，我想找到从里斯本到波尔图最便宜的交通方式。")
    assert "里斯本到波尔图最便宜" not in out.text and out.redacted == 1
