"""The judges' degenerate-output gates, on hand-written judge outputs: an output that must fail each gate
and one that passes. Degenerate first and sound when asked again -> scored, with a `judge_output_gated`
degradation; degenerate twice -> a failed judgment with the reason, never averaged in. Also: AEPD spans
not in the response removed and counted, PQR criteria left blank handled as DeepResearch Bench's
`calculate_weighted_scores` does, and R reading gold-context sources from the run's source store."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from atelier.agents.judges.aepd import annotation_model, located
from atelier.agents.judges.base import JudgeEnv, blank, create_judge
from atelier.agents.judges.store import ArtifactStore
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.case import Case, Gold, Persona, PTKBStatement, Query, RJPair
from atelier.benchmarks.common.degradation import counts_by_kind
from atelier.graphs.sources import SourceStore
from tests.judge_doubles import FakeWeb, HandWritten, prompt, serving, sha256

NOTE = "# Note"  # what a re-ask adds to the prompt: a new request, so a new sample


def asked_again(messages) -> bool:
    return NOTE in prompt(messages)


def first_then(first: dict, again: dict):
    """An answer that is `first` on the first ask and `again` once the judge asks again with a note."""
    return lambda messages, _settings: again if asked_again(messages) else first


def run(judge, case, response, env):
    return asyncio.run(judge.judge(case, response, env))


def kinds(result) -> dict[str, int]:
    return counts_by_kind(result.degraded)


@pytest.mark.parametrize(
    ("text", "degenerate"),
    [
        (",", True),
        (");", True),
        ("", True),
        ("  \n", True),
        ("...", True),
        ("—", True),
        ("ok", False),
        ("5", False),
        ("Zu kurz.", False),
        ("東京", False),
    ],
)
def test_blank_means_no_letter_or_digit(text, degenerate) -> None:
    assert blank(text) is degenerate


# --------------------------------------------------------------------------- BESPOKE

PAIRS = [
    RJPair(response="Old answer", score=3, feedback="fine", criterion=c)
    for c in ("need_alignment", "content_depth", "tone", "explanation_style")
]
RATINGS = {"need_alignment": 4, "content_depth": 3, "tone": 5, "explanation_style": 2}


def evaluation(feedback: dict[str, str] | None = None, reasoning: dict[str, str] | None = None) -> dict:
    feedback, reasoning = feedback or {}, reasoning or {}
    return {
        c: {"reasoning": reasoning.get(c, f"{c} reasoning"), "score": s, "feedback": feedback.get(c, f"{c} feedback")}
        for c, s in RATINGS.items()
    }


def bespoke_run(answer, tmp_path):
    case = Case(
        id="b1",
        benchmark="t",
        user_id="u",
        query=Query(text="How do tides work?"),
        gold=Gold(information_need="need", rj_pairs=PAIRS),
    )
    gateway = HandWritten(
        {
            "_Rubric": {
                "analysis": "a",
                "need_alignment": "n",
                "content_depth": "d",
                "tone": "t",
                "explanation_style": "e",
            },
            "BespokeEvaluation": answer,
        }
    )
    result = run(
        create_judge({"name": "bespoke", "recall": False}),
        case,
        SystemResponse(text="x"),
        JudgeEnv(gateway=gateway, store=ArtifactStore([tmp_path])),
    )
    return result, gateway


def test_bespoke_sound_feedback_passes_the_gate_with_one_call(tmp_path) -> None:
    result, gateway = bespoke_run(evaluation(), tmp_path)
    assert result.error is None and result.degraded == [] and gateway.count("BespokeEvaluation") == 1
    assert result.score == pytest.approx((80 + 60 + 100 + 40) / 4)


@pytest.mark.parametrize(
    ("degenerate", "named"),
    [
        (evaluation(feedback={"tone": ","}), "the feedback on tone"),  # what SmolLM2 answered
        (evaluation(reasoning={"content_depth": "   "}), "the reasoning on content depth"),
    ],
)
def test_bespoke_degenerate_then_sound_is_scored_with_the_re_ask_recorded(tmp_path, degenerate, named) -> None:
    result, gateway = bespoke_run(first_then(degenerate, evaluation()), tmp_path)
    assert result.error is None and result.score == pytest.approx((80 + 60 + 100 + 40) / 4)
    assert gateway.count("BespokeEvaluation") == 2
    [gated] = result.degraded
    assert (gated.kind, gated.step, gated.count) == ("judge_output_gated", "judge:bespoke", 1)
    assert named in gated.detail and "empty or punctuation only" in gated.detail
    # the second request is a new one (the response cache cannot return the first answer), naming the problem
    first, second = [m for _, name, m in gateway.calls if name == "BespokeEvaluation"]
    assert not asked_again(first) and asked_again(second) and named in prompt(second)


def test_bespoke_degenerate_twice_fails_the_judgment_with_the_reason(tmp_path) -> None:
    result, gateway = bespoke_run(evaluation(feedback={"tone": ","}), tmp_path)
    assert result.failed and result.score is None and gateway.count("BespokeEvaluation") == 2
    assert result.error.startswith(
        "bespoke_judge model hand-written: the evaluation still degenerate after asking "
        "again: the feedback on tone is empty or punctuation only (',')"
    )


# --------------------------------------------------------------------------- AEPD

PROFILE = ["I live in Japan.", "I am a vegetarian cook."]
RESPONSE = "Kyoto has many temples.  Vegetarian shojin ryori is served at Buddhist temples. Trains are fast."


def aepd_case() -> Case:
    return Case(
        id="ikat:1",
        benchmark="t",
        user_id="u",
        query=Query(text="What should I see in Kyoto?"),
        history=[PTKBStatement(id=f"p{i}", text=t) for i, t in enumerate(PROFILE, start=1)],
    )


def annotation(topic: str = "Visiting Kyoto", **contents: str) -> dict:
    spans = {
        "Temples": "Kyoto has many temples.",
        "Food": "vegetarian SHOJIN ryori is served at Buddhist temples.",
        "Transport": "",
        **contents,
    }
    personal = {"Temples": ["1"], "Food": ["2"], "Transport": []}
    return {
        "topic": topic,
        "aspects": [
            {"aspect": name, "profile_statements": personal.get(name, []), "content": span}
            for name, span in spans.items()
        ],
    }


def aepd_run(answer, **config):
    gateway = HandWritten({"TurnAnnotation": answer})
    result = run(
        create_judge({"name": "aepd", **config}), aepd_case(), SystemResponse(text=RESPONSE), JudgeEnv(gateway=gateway)
    )
    return result, gateway


def test_aepd_sound_annotation_passes_the_gate() -> None:
    result, gateway = aepd_run(annotation())
    assert result.error is None and result.degraded == [] and gateway.count("TurnAnnotation") == 1
    # both covered aspects personalized (4 and 8 words), one possible aspect not: PP = 1, PP' = 2/3 -> NPP 1;
    # L_nonper = 0 -> NPCL = 6 / 12; AR = 2/3; RNSS = sqrt(((4/12 - 1/2)^2 + (8/12 - 1/2)^2) / 2) = 1/6
    assert result.criteria["npp"] == pytest.approx(1.0) and result.score == pytest.approx(0.5)
    assert result.criteria["d_score"] == pytest.approx(2 / 3 * (1 - 1 / 6))
    assert result.details["spans_removed"] == 0 and result.flags == []


def test_the_reproduced_defect_a_punctuation_topic_with_one_aspect_outside_the_response_fails() -> None:
    # SmolLM2 on main: topic ");", one aspect whose span is not in the response -> D_score 1.0
    degenerate = {
        "topic": ");",
        "aspects": [
            {"aspect": "x", "profile_statements": [], "content": "not in it"},
            {"aspect": "X", "profile_statements": [], "content": ""},
        ],
    }
    result, gateway = aepd_run(degenerate)
    assert result.failed and result.score is None and gateway.count("TurnAnnotation") == 2
    assert result.error.startswith(
        "aepd_judge model hand-written: the aspect annotation still degenerate after "
        "asking again: the topic is empty or punctuation only (');')"
    )
    assert "1 distinct possible aspect(s) of the topic; at least 2 are needed" in result.error
    # the schema itself asks for at least min_aspects aspects (a grammar-constrained server enforces it)
    with pytest.raises(ValidationError, match="at least 2 items"):
        annotation_model(2, 2, 25).model_validate(
            {"topic": "t", "aspects": [{"aspect": "a", "profile_statements": [], "content": ""}]}
        )


def test_aepd_too_few_distinct_aspects_then_enough_is_scored_and_twice_fails() -> None:
    repeated = {
        "topic": "Visiting Kyoto",
        "aspects": [
            {"aspect": name, "profile_statements": [], "content": ""} for name in ("Temples", " temples ", "TEMPLES")
        ],
    }
    result, gateway = aepd_run(first_then(repeated, annotation()), min_aspects=3)
    assert result.error is None and result.score == pytest.approx(0.5)
    assert kinds(result) == {"judge_output_gated": 1} and gateway.count("TurnAnnotation") == 2
    assert "1 distinct possible aspect(s) of the topic; at least 3 are needed" in result.degraded[0].detail
    failed, _ = aepd_run(repeated, min_aspects=3)
    assert failed.failed and "1 distinct possible aspect(s) of the topic; at least 3 are needed" in failed.error


def test_aepd_span_not_in_the_response_then_found_is_scored_with_the_re_ask_recorded() -> None:
    invented = annotation(Food="Kyoto is famous for its vegan ramen.")
    result, gateway = aepd_run(first_then(invented, annotation()))
    assert result.error is None and result.score == pytest.approx(0.5)
    assert kinds(result) == {"judge_output_gated": 1} and gateway.count("TurnAnnotation") == 2
    assert "1 quoted span(s) are not in the response" in result.degraded[0].detail
    assert result.details["spans_removed"] == 0


def test_aepd_spans_still_not_in_the_response_are_removed_before_scoring_and_counted() -> None:
    invented = annotation(Food="Kyoto is famous for its vegan ramen.", Transport="Buses run all night.")
    result, gateway = aepd_run(invented)
    assert result.error is None and gateway.count("TurnAnnotation") == 2
    assert kinds(result) == {"judge_output_gated": 1, "spans_removed": 2} and "spans_removed" in result.flags
    removed = next(d for d in result.degraded if d.kind == "spans_removed")
    assert removed.step == "judge:aepd" and "2 of 3 quoted spans not in the response" in removed.detail
    # only Temples (4 words, personalized) is covered: PP = 1, PP' = 2/3 -> NPP 1; L_nonper = 0 -> NPCL = 4/4;
    # AR = 1/3, CLU = 1
    assert result.score == pytest.approx(1.0) and result.criteria["d_score"] == pytest.approx(1 / 3)
    rows = {r["aspect"]: r for r in result.details["aspects"]}
    assert rows["Food"]["content"] == "" and rows["Food"]["removed_span"] == "Kyoto is famous for its vegan ramen."
    assert result.details["spans_removed"] == 2


def test_a_span_is_found_up_to_whitespace_and_case_and_across_an_ellipsis() -> None:
    assert located("kyoto HAS many\ntemples.", RESPONSE) == "kyoto HAS many\ntemples."
    assert located("Kyoto has … at Buddhist temples.", RESPONSE) == "Kyoto has at Buddhist temples."
    assert located("Kyoto has ... fast", RESPONSE) == "Kyoto has fast"
    assert located("Trains are fast ... Kyoto has", RESPONSE) is None  # pieces out of order
    assert located("Kyoto has many shrines.", RESPONSE) is None
    assert located("...", RESPONSE) is None and located(",", RESPONSE) is None


def test_aepd_min_aspects_cannot_exceed_max_aspects() -> None:
    with pytest.raises(ValidationError, match=r"min_aspects \(5\) is above max_aspects \(4\)"):
        create_judge({"name": "aepd", "min_aspects": 5, "max_aspects": 4})
    with pytest.raises(ValidationError):
        create_judge({"name": "aepd", "min_aspects": 1})


# --------------------------------------------------------------------------- PQR: P and Q scores

FIELDS = {
    "GOAL": "goal_alignment",
    "CONT": "content_alignment",
    "PRES": "presentation_fit",
    "ACTI": "actionability_practicality",
}
WEIGHTS = {"GOAL": 0.4, "CONT": 0.3, "PRES": 0.2, "ACTI": 0.1}
CRITERIA = {"GOAL": [0.5, 0.5], "CONT": [1.0], "PRES": [1.0], "ACTI": [1.0]}
SCORED = {"GOAL": [(8, "clear"), (2, "weak")], "CONT": [(5, "ok")], "PRES": [(7, "ok")], "ACTI": [(10, "ok")]}


def pdr_case() -> Case:
    return Case(
        id="c1",
        benchmark="t",
        user_id="u1",
        query=Query(text="Plan a week in Norway on a budget."),
        persona=Persona(user_id="u1", attributes={"Basic Attributes": {"Occupation": "student"}}),
    )


def p_scores(**changes: list[tuple[int | None, str]]) -> dict:
    table = {**SCORED, **changes}
    return {
        FIELDS[code]: {f"{code}_{i}": {"analysis": a, "score": s} for i, (s, a) in enumerate(rows, start=1)}
        for code, rows in table.items()
    }


def p_answers(scores) -> dict:
    def criteria(messages, _settings):
        code = next(c for c in CRITERIA if f"({c})" in prompt(messages).split("# The research task")[0])
        return {
            "analysis": "a",
            "criteria": [
                {"criterion": f"{code} criterion {i}", "explanation": "why", "weight": w}
                for i, w in enumerate(CRITERIA[code], start=1)
            ],
        }

    return {
        "PDimensionWeights": {"analysis": "w", "weights": WEIGHTS},
        "DimensionCriteria": criteria,
        "PScores": scores,
    }


def p_run(scores):
    gateway = HandWritten(p_answers(scores))
    return run(
        create_judge({"name": "pqr", "axes": ["P"]}), pdr_case(), SystemResponse(text="r"), JudgeEnv(gateway=gateway)
    ), gateway


def test_pqr_fully_scored_passes_the_gate() -> None:
    result, gateway = p_run(p_scores())
    assert result.error is None and result.degraded == [] and gateway.count("PScores") == 1
    assert result.score == pytest.approx(0.4 * 5 + 0.3 * 5 + 0.2 * 7 + 0.1 * 10)  # 5.9


def test_pqr_criterion_left_blank_then_scored_is_scored_with_the_re_ask_recorded() -> None:
    result, gateway = p_run(first_then(p_scores(GOAL=[(8, "clear"), (None, "")]), p_scores()))
    assert result.error is None and result.score == pytest.approx(5.9) and gateway.count("PScores") == 2
    [gated] = result.degraded
    assert (gated.kind, gated.step) == ("judge_output_gated", "judge:pqr")
    assert "criteria GOAL_2 were left without a score" in gated.detail
    assert result.details["P"]["skipped_criteria"] == 0


def test_pqr_criterion_blank_twice_is_left_out_as_deepresearch_bench_does_and_recorded() -> None:
    result, gateway = p_run(p_scores(GOAL=[(8, "clear"), (None, "")]))
    assert result.error is None and gateway.count("PScores") == 2
    assert kinds(result) == {"criterion_unscored": 1, "judge_output_gated": 1}
    unscored = next(d for d in result.degraded if d.kind == "criterion_unscored")
    assert unscored.step == "judge:pqr" and unscored.detail.startswith("P: GOAL_2 left without a score")
    # calculate_weighted_scores: the blank criterion leaves GOAL's weighted mean (8 * 0.5 / 0.5 = 8), it
    # does not score 0 in it; P = 0.4 * 8 + 0.3 * 5 + 0.2 * 7 + 0.1 * 10
    assert result.criteria["GOAL"] == pytest.approx(8.0) and result.score == pytest.approx(7.1)
    assert result.details["P"]["coverage"] == pytest.approx(0.8) and "skipped_criteria" in result.flags


def test_pqr_dimension_with_no_criterion_scored_scores_zero_and_keeps_its_weight() -> None:
    result, _ = p_run(p_scores(ACTI=[(None, "")]))
    assert result.error is None and kinds(result) == {"criterion_unscored": 1, "judge_output_gated": 1}
    # calculate_weighted_scores: dim_total_weight == 0 -> the dimension's average is 0, times its weight
    assert result.criteria["ACTI"] == 0.0 and result.score == pytest.approx(0.4 * 5 + 0.3 * 5 + 0.2 * 7)
    assert result.details["P"]["unscored_dimensions"] == ["ACTI"]


def test_pqr_axis_with_no_criterion_scored_twice_fails() -> None:
    nothing = p_scores(**{code: [(None, "")] * len(rows) for code, rows in SCORED.items()})
    result, gateway = p_run(nothing)
    assert result.failed and "no criterion of P was scored, even when asked again" in result.error
    assert gateway.count("PScores") == 2


def test_pqr_punctuation_analysis_then_sound_is_scored_and_twice_fails() -> None:
    degenerate = p_scores(CONT=[(5, ",")])
    result, _ = p_run(first_then(degenerate, p_scores()))
    assert result.error is None and result.score == pytest.approx(5.9)
    assert "the analysis of CONT_1 is empty or punctuation only (',')" in result.degraded[0].detail
    failed, _ = p_run(degenerate)
    assert failed.failed and failed.score is None
    assert failed.error.startswith(
        "pqr_judge model hand-written: P scores still degenerate after asking again: the analysis of CONT_1"
    )


# --------------------------------------------------------------------------- PQR: R

PAGE_A = "Oslo is the capital of Norway and its largest city."
PAGE_B = "Bergen has about 285,000 inhabitants."
CLAIMS = [
    {"fact": "Oslo is the capital of Norway.", "ref_idx": "1", "url": ""},
    {"fact": "Bergen has 285,000 inhabitants.", "ref_idx": "2", "url": ""},
]


def support(reasoning: str = "the source says so"):
    def answer(messages, _settings):
        lines = [line for line in prompt(messages).split("# Statements")[1].splitlines() if line.startswith("c")]
        return {line.split(":")[0]: {"reasoning": reasoning, "verdict": "supported"} for line in lines}

    return answer


def r_run(response, env_extra=None, claims=CLAIMS, support_answer=None, **config):
    gateway = HandWritten(
        {
            "ExtractedClaims": claims if callable(claims) else {"claims": claims},
            "SupportVerdicts": support_answer or support(),
        }
    )
    env = JudgeEnv(gateway=gateway, **(env_extra or {}))
    judge = create_judge({"name": "pqr", "axes": ["R"], "dedupe": "exact", **config})
    return run(judge, pdr_case(), response, env), gateway


def gold_response() -> SystemResponse:
    """Two gold-context citations: no URL, the sha256 of the text the system read."""
    return SystemResponse(
        text="Oslo is the capital [1]. Bergen has 285,000 people [2].",
        citations=[
            Citation(source_id="g-a", title="Gold information 1", sha256=sha256(PAGE_A), number=1),
            Citation(source_id="g-b", title="Gold information 2", sha256=sha256(PAGE_B), number=2),
        ],
    )


def test_r_reads_gold_context_sources_from_the_runs_source_store(tmp_path) -> None:
    store = SourceStore(tmp_path / "sources")
    store.put(PAGE_A), store.put(PAGE_B)
    web = FakeWeb({})
    result, gateway = r_run(gold_response(), {"sources": store.get, "web": serving(web)})
    assert result.error is None and result.degraded == [] and web.fetched == []
    r = result.details["R"]
    assert r["unreadable_sources"] == 0 and all(s["read"] and s["text_matches_citation"] for s in r["sources"])
    assert result.criteria["FA"] == 10 and result.criteria["CC"] == 10 and result.score == 10
    shown = [prompt(m) for _, name, m in gateway.calls if name == "SupportVerdicts"]
    assert any(PAGE_A in text for text in shown) and any(PAGE_B in text for text in shown)


def test_unreadable_sources_are_counted_flagged_and_count_unsupported_by_default(tmp_path) -> None:
    store = SourceStore(tmp_path / "sources")
    store.put(PAGE_A)  # the second gold text is not in the store
    result, _ = r_run(gold_response(), {"sources": store.get})
    assert result.error is None and "unreadable_sources" in result.flags
    [unread] = result.degraded
    assert (unread.kind, unread.step, unread.count) == ("source_unreadable", "judge:pqr", 1)
    assert "1 of 2 cited sources could not be read (1 claim(s) counted unsupported)" in unread.detail
    assert "[2]: source not readable: no stored text with sha256" in unread.detail
    r = result.details["R"]
    assert r["unreadable_sources"] == 1 and r["n_unreadable"] == 1 and r["fa_denominator"] == 2
    assert result.criteria["FA"] == pytest.approx(5.0) and result.score == pytest.approx((5 + 10) / 2)


def test_unreadable_exclude_leaves_their_claims_out_of_fa(tmp_path) -> None:
    store = SourceStore(tmp_path / "sources")
    store.put(PAGE_A)
    result, _ = r_run(gold_response(), {"sources": store.get}, unreadable="exclude")
    assert kinds(result) == {"source_unreadable": 1} and "left out of FA" in result.degraded[0].detail
    # 1 supported of 1 readable cited claim; CC still counts both cited claims
    assert result.criteria["FA"] == pytest.approx(10.0) and result.criteria["CC"] == pytest.approx(10.0)
    assert result.details["R"]["fa_denominator"] == 1
    # with no store at all nothing can be read: FA 0 by default, undefined when excluded
    nothing, _ = r_run(gold_response())
    assert nothing.criteria["FA"] == 0 and kinds(nothing) == {"source_unreadable": 2}
    assert "no source store to read the cited text" in nothing.degraded[0].detail
    excluded, _ = r_run(gold_response(), unreadable="exclude")
    assert excluded.error is None and excluded.criteria["FA"] is None and excluded.score is None


def test_r_support_reasoning_degenerate_then_sound_is_scored_and_twice_fails() -> None:
    response = SystemResponse(text="Oslo [1].", citations=[Citation(source_id="a", url="https://a.example/oslo")])
    web = {"web": serving(FakeWeb({"https://a.example/oslo": PAGE_A}))}
    claims = CLAIMS[:1]
    sound, degenerate = support(), support(reasoning=";")
    result, gateway = r_run(response, web, claims, lambda m, s: (sound if asked_again(m) else degenerate)(m, s))
    assert result.error is None and result.score == 10 and gateway.count("SupportVerdicts") == 2
    assert kinds(result) == {"judge_output_gated": 1} and "statement(s) c1" in result.degraded[0].detail
    failed, _ = r_run(response, web, claims, degenerate)
    assert failed.failed and "the support check of source [1] still degenerate after asking again" in failed.error


def test_r_punctuation_only_extracted_fact_then_sound_is_scored_and_twice_fails() -> None:
    response = SystemResponse(text="Oslo [1].", citations=[Citation(source_id="a", url="https://a.example/oslo")])
    web = {"web": serving(FakeWeb({"https://a.example/oslo": PAGE_A}))}
    degenerate = {"claims": [*CLAIMS[:1], {"fact": ".", "ref_idx": "", "url": ""}]}
    result, gateway = r_run(response, web, first_then(degenerate, {"claims": CLAIMS[:1]}))
    assert result.error is None and result.score == 10 and gateway.count("ExtractedClaims") == 2
    assert "1 extracted statement(s) are empty or punctuation only (e.g. '.')" in result.degraded[0].detail
    failed, _ = r_run(response, web, lambda m, s: degenerate)
    assert failed.failed and "the claim extraction still degenerate after asking again" in failed.error


# --------------------------------------------------------------------------- LoCoMo and PrefEval (found by the kit)


def locomo_case() -> Case:
    return Case(
        id="l1",
        benchmark="locomo",
        user_id="s",
        query=Query(text="When did she move?"),
        meta={"category": 2},
        gold=Gold(answer="7 May 2023"),
    )


def test_locomo_blank_reasoning_then_sound_is_scored_and_twice_fails() -> None:
    """`atelier check judge locomo` found a verdict with punctuation for reasoning scored as sound."""
    sound, blank_one = {"reasoning": "same date", "verdict": "CORRECT"}, {"reasoning": ";", "verdict": "CORRECT"}
    judge, response = create_judge({"name": "locomo"}), SystemResponse(text="She moved on 7 May 2023")
    gateway = HandWritten({"Correctness": first_then(blank_one, sound)})
    result = run(judge, locomo_case(), response, JudgeEnv(gateway=gateway))
    assert result.score == 1.0 and gateway.count("Correctness") == 2
    assert kinds(result) == {"judge_output_gated": 1} and "the reasoning is empty" in result.degraded[0].detail
    twice = run(judge, locomo_case(), response, JudgeEnv(gateway=HandWritten({"Correctness": blank_one})))
    assert twice.failed and twice.score is None and "the reasoning is empty or punctuation only" in twice.error


def test_prefeval_blank_explanation_or_unquoted_yes_then_sound_is_scored_and_twice_fails() -> None:
    case = pdr_case().model_copy(update={"gold": Gold(preference="I am vegan.")})
    sound_check, blank_check = {"explanation": "it respects it", "answer": "No"}, {"explanation": ",", "answer": "No"}
    quoted_yes, unquoted_yes = (
        {"preference": "since you are vegan", "answer": "Yes"},
        {"preference": "", "answer": "Yes"},
    )
    gateway = HandWritten(
        {"Acknowledgement": first_then(unquoted_yes, quoted_yes), "Check": first_then(blank_check, sound_check)}
    )
    result = run(create_judge({"name": "prefeval"}), case, SystemResponse(text="x"), JudgeEnv(gateway=gateway))
    assert not result.failed and kinds(result) == {"judge_output_gated": 4}  # the acknowledgement and three checks
    assert any("a Yes with the preference empty" in d.detail for d in result.degraded)
    unchanged = HandWritten({"Acknowledgement": quoted_yes, "Check": blank_check})
    twice = run(create_judge({"name": "prefeval"}), case, SystemResponse(text="x"), JudgeEnv(gateway=unchanged))
    assert twice.failed and "the explanation is empty or punctuation only" in twice.error
    # a No needs no quote: an empty preference is what the schema asks for then
    no = HandWritten({"Acknowledgement": {"preference": "", "answer": "No"}, "Check": sound_check})
    assert run(create_judge({"name": "prefeval"}), case, SystemResponse(text="x"), JudgeEnv(gateway=no)).degraded == []
