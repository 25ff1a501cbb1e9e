"""Every judge end to end on hand-written judge outputs: the aggregation is checked against numbers
worked out by hand from the papers (weights, skipped criteria, duplicate and uncited claims, unknown
verdicts, order flips, empty gold lists), and a malformed output fails the judgment, never scoring 0."""

from __future__ import annotations

import asyncio

import pytest

from atelier.agents.judges.base import JudgeEnv, create_judge
from atelier.agents.judges.store import ArtifactStore
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.case import Case, Criterion, Gold, Persona, PTKBStatement, Query, RJPair, RubricAspect
from tests.judge_doubles import FakeWeb, HandWritten, HashedCitation, prompt, serving, sha256

PAGE_A = "Oslo is the capital of Norway and its largest city."
PAGE_B = "Bergen has about 285,000 inhabitants. It is known for rain."


def pdr_case(**gold) -> Case:
    return Case(
        id="c1",
        benchmark="t",
        user_id="u1",
        query=Query(text="Plan a week in Norway on a budget."),
        persona=Persona(user_id="u1", attributes={"Basic Attributes": {"Occupation": "student"}}),
        gold=Gold(**gold),
    )


def run(judge, case, response, env):
    return asyncio.run(judge.judge(case, response, env))


# --------------------------------------------------------------------------- PQR

P_CRITERIA = {  # (given weight, score) per criterion; None = the scorer gave no score
    "GOAL": [(0.5, 8), (0.5, None)],
    "CONT": [(0.7, 5)],
    "PRES": [(0.25, 4), (0.75, 8)],
    "ACTI": [(1.0, 10)],
}
Q_CRITERIA = {"DEIN": [(0.2, 5), (0.8, 10)], "LOGC": [(1.0, 6)], "CLAR": [(1.0, 2)]}
FIELDS = {
    "GOAL": "goal_alignment",
    "CONT": "content_alignment",
    "PRES": "presentation_fit",
    "ACTI": "actionability_practicality",
    "DEIN": "depth_insight",
    "LOGC": "logical_coherence",
    "CLAR": "clarity_readability",
}
CLAIMS = [
    {"fact": "Oslo is the capital of Norway.", "ref_idx": "1", "url": ""},
    {"fact": "Oslo is the capital of Norway.", "ref_idx": "1", "url": ""},  # exact duplicate: counts once
    {"fact": "Oslo is Norway's capital city.", "ref_idx": "1", "url": ""},  # restatement: merged by the model pass
    {"fact": "Bergen has 285,000 inhabitants.", "ref_idx": "2", "url": ""},
    {"fact": "Fjords were carved by glaciers.", "ref_idx": "", "url": ""},  # uncited
    {"fact": "Trondheim was founded in 997.", "ref_idx": "2", "url": ""},  # the checker answers unknown
    {"fact": "Stavanger is an oil hub.", "ref_idx": "0", "url": "https://c.example/x"},  # source unreadable
]


def pqr_answers(table_p=P_CRITERIA, table_q=Q_CRITERIA, claims=CLAIMS) -> dict:
    def criteria(messages, _settings):
        text = prompt(messages)
        code = next(c for c in {**table_p, **table_q} if f"({c})" in text.split("# The research task")[0])
        table = {**table_p, **table_q}[code]
        return {
            "analysis": f"criteria for {code}",
            "criteria": [
                {"criterion": f"{code} criterion {i}", "explanation": "why", "weight": w}
                for i, (w, _) in enumerate(table, start=1)
            ],
        }

    def scores(table):
        return {
            FIELDS[code]: {f"{code}_{i}": {"analysis": "a", "score": s} for i, (_, s) in enumerate(rows, start=1)}
            for code, rows in table.items()
        }

    def support(messages, _settings):
        text = prompt(messages)
        verdicts = {"Oslo is the capital": "supported", "Bergen": "supported", "Trondheim": "unknown"}
        lines = [line for line in text.split("# Statements")[1].splitlines() if line.startswith("c")]
        return {
            line.split(":")[0]: {"reasoning": "r", "verdict": next(v for k, v in verdicts.items() if k in line)}
            for line in lines
        }

    return {
        "PDimensionWeights": {"analysis": "w", "weights": {"GOAL": 0.8, "CONT": 0.6, "PRES": 0.4, "ACTI": 0.2}},
        "QDimensionWeights": {"analysis": "w", "weights": {"DEIN": 0.5, "LOGC": 0.25, "CLAR": 0.25}},
        "DimensionCriteria": criteria,
        "PScores": scores(table_p),
        "QScores": scores(table_q),
        "ExtractedClaims": {"claims": claims},
        "Duplicates": {"c1": "new", "c2": "1", "c3": "new", "c4": "new", "c5": "new", "c6": "new"},
        "SupportVerdicts": support,
    }


def cited_response() -> SystemResponse:
    return SystemResponse(
        text="Oslo is the capital [1]. Bergen has 285,000 people [2].",
        citations=[
            HashedCitation(source_id="a", url="https://a.example/oslo", title="Oslo", sha256=sha256(PAGE_A)),
            HashedCitation(
                source_id="b", url="https://b.example/bergen", title="Bergen", sha256=sha256("another text")
            ),
        ],
    )


def test_pqr_end_to_end_matches_the_hand_worked_scores(tmp_path) -> None:
    gateway = HandWritten(pqr_answers())
    web = FakeWeb({"https://a.example/oslo": PAGE_A, "https://b.example/bergen": PAGE_B})
    env = JudgeEnv(gateway=gateway, web=serving(web), store=ArtifactStore([tmp_path]))
    result = run(create_judge({"name": "pqr"}), pdr_case(), cited_response(), env)

    assert result.error is None and result.scale == "0-10"
    # dimension weights 0.8/0.6/0.4/0.2 normalised to 0.4/0.3/0.2/0.1; GOAL's second criterion skipped,
    # so S_GOAL is its first criterion alone (8); CONT's lone weight 0.7 becomes 1
    p = result.details["P"]
    assert p["weights"] == pytest.approx({"GOAL": 0.4, "CONT": 0.3, "PRES": 0.2, "ACTI": 0.1})
    assert result.criteria["GOAL"] == 8 and result.criteria["CONT"] == 5 and result.criteria["PRES"] == 7
    assert result.criteria["P"] == pytest.approx(0.4 * 8 + 0.3 * 5 + 0.2 * 7 + 0.1 * 10)  # 7.1
    assert p["coverage"] == pytest.approx(0.4 * 0.5 + 0.3 + 0.2 + 0.1) and p["skipped_criteria"] == 1
    assert "skipped_criteria" in result.flags
    # the blank criterion was asked again once (the double answers the same), then recorded as unscored;
    # the unreadable source is counted
    assert gateway.count("PScores") == 2 and gateway.count("QScores") == 1
    assert [(d.kind, d.step, d.count) for d in result.degraded] == [
        ("judge_output_gated", "judge:pqr", 1),
        ("criterion_unscored", "judge:pqr", 1),
        ("source_unreadable", "judge:pqr", 1),
    ]
    assert "unreadable_sources" in result.flags
    assert result.criteria["Q"] == pytest.approx(0.5 * 9 + 0.25 * 6 + 0.25 * 2)  # 6.5
    # R: 7 extracted, 1 exact duplicate, 1 restatement merged -> 5 triplets, 4 cited; supported: Oslo [1],
    # Bergen [2]; Trondheim unknown and Stavanger unreadable count as unsupported
    r = result.details["R"]
    assert (r["n_extracted"], r["n_total"], r["n_cited"], r["n_supported"]) == (7, 5, 4, 2)
    assert r["n_duplicates"] == 1 and r["llm_merged"] == [[1, 2]]
    assert result.criteria["FA"] == pytest.approx(10 * 2 / 4) and result.criteria["CC"] == pytest.approx(10 * 4 / 5)
    assert result.criteria["R"] == pytest.approx(6.5)
    assert result.score == pytest.approx((7.1 + 6.5 + 6.5) / 3)
    assert r["unreadable_sources"] == 1 and "source not readable" in next(
        c["reason"] for c in r["claims"] if c["claim"].startswith("Stavanger")
    )
    # page A is the text the system read; page B's hash differs from what the citation recorded
    assert r["source_text_mismatches"] == 1 and "source_text_mismatch" in result.flags
    assert sorted(web.fetched) == ["https://a.example/oslo", "https://b.example/bergen", "https://c.example/x"]


def test_pqr_criteria_are_generated_once_per_pair_and_shared_by_concurrent_judgments(tmp_path) -> None:
    gateway = HandWritten(pqr_answers())
    judge = create_judge({"name": "pqr"})
    env = JudgeEnv(
        gateway=gateway, web=serving(FakeWeb({})), store=ArtifactStore([tmp_path / "run", tmp_path / "cache"])
    )

    async def five_systems():
        return await asyncio.gather(*(judge.judge(pdr_case(), cited_response(), env) for _ in range(5)))

    results = asyncio.run(five_systems())
    assert all(r.error is None for r in results)
    assert gateway.count("PDimensionWeights") == 1 and gateway.count("QDimensionWeights") == 1
    # each report's P scores are asked twice: GOAL's second criterion is left blank and asked again
    assert gateway.count("DimensionCriteria") == 7 and gateway.count("PScores") == 10 and gateway.count("QScores") == 5
    assert len({r.details["P"]["criteria_key"] for r in results}) == 1
    # a later run (a new store object on the same cache) reuses them without a call
    later = JudgeEnv(
        gateway=gateway, web=serving(FakeWeb({})), store=ArtifactStore([tmp_path / "run2", tmp_path / "cache"])
    )
    run(judge, pdr_case(), cited_response(), later)
    assert gateway.count("PDimensionWeights") == 1 and (tmp_path / "run2" / "pqr_criteria_P").is_dir()
    # without reuse every report generates its own
    run(create_judge({"name": "pqr", "reuse_criteria": False}), pdr_case(), cited_response(), env)
    assert gateway.count("PDimensionWeights") == 2


def test_pqr_report_citing_nothing_scores_fa_zero_or_is_excluded_but_never_dropped(tmp_path) -> None:
    uncited = [{"fact": "Fjords were carved by glaciers.", "ref_idx": "", "url": ""}]
    env = JudgeEnv(gateway=HandWritten(pqr_answers(claims=uncited)), store=ArtifactStore([tmp_path]))
    response = SystemResponse(text="Fjords were carved by glaciers.")
    zero = run(create_judge({"name": "pqr"}), pdr_case(), response, env)
    assert zero.criteria["FA"] == 0 and zero.criteria["CC"] == 0 and zero.criteria["R"] == 0
    assert zero.score == pytest.approx((7.1 + 6.5 + 0) / 3) and "no_cited_claims" in zero.flags
    excluded = run(create_judge({"name": "pqr", "no_citation": "exclude"}), pdr_case(), response, env)
    assert excluded.error is None and excluded.score is None and excluded.criteria["FA"] is None
    assert "no_cited_claims" in excluded.flags


def test_pqr_uses_a_tasks_shipped_criteria_for_q(tmp_path) -> None:
    shipped = [
        Criterion(dimension="insight", criterion="i1", weight=0.6),
        Criterion(dimension="insight", criterion="i2", weight=0.2),
        Criterion(dimension="readability", criterion="r1", weight=1.0),
    ]
    case = pdr_case(criteria=shipped, dimension_weights={"insight": 0.3, "readability": 0.1})
    answers = pqr_answers()
    answers["QScores"] = {
        "insight": {"insight_1": {"analysis": "a", "score": 9}, "insight_2": {"analysis": "a", "score": 1}},
        "readability": {"readability_1": {"analysis": "a", "score": 4}},
    }
    gateway = HandWritten(answers)
    result = run(
        create_judge({"name": "pqr", "axes": ["Q"]}), case, SystemResponse(text="r"), JudgeEnv(gateway=gateway)
    )
    # weights normalised: insight 0.75 (criteria 0.75/0.25), readability 0.25
    assert result.criteria["insight"] == pytest.approx(0.75 * 9 + 0.25 * 1)
    assert result.score == pytest.approx(0.75 * 7 + 0.25 * 4)
    assert result.details["Q"]["criteria_source"] == "shipped" and gateway.count("QDimensionWeights") == 0
    assert "not the overall" in result.details["score_is"]


# --------------------------------------------------------------------------- BESPOKE

BESPOKE_PAIRS = [
    RJPair(response="Old answer", score=s, feedback=f"fb {c}", criterion=c)
    for c, s in (("need_alignment", 4), ("content_depth", 2), ("tone", 5), ("explanation_style", 3))
]


def bespoke_answers(contained: dict[str, bool]) -> dict:
    return {
        "_Rubric": {
            "analysis": "a",
            "need_alignment": "n",
            "content_depth": "d",
            "tone": "t",
            "explanation_style": "e",
        },
        "BespokeEvaluation": {
            c: {"reasoning": "r", "score": s, "feedback": f"{c} feedback"}
            for c, s in (("need_alignment", 4), ("content_depth", 3), ("tone", 5), ("explanation_style", 2))
        },
        "_Contained": lambda messages, _s: {
            "contained": next(v for k, v in contained.items() if k in prompt(messages))
        },
    }


def test_bespoke_scales_by_twenty_and_adds_recall_as_in_table_4(tmp_path) -> None:
    claims = ["Claim alpha.", "Claim beta.", "Claim gamma."]
    case = pdr_case(information_need="need", rj_pairs=BESPOKE_PAIRS, information_claims=claims)
    gateway = HandWritten(bespoke_answers({"alpha": True, "beta": False, "gamma": True}))
    result = run(
        create_judge({"name": "bespoke"}),
        case,
        SystemResponse(text="x"),
        JudgeEnv(gateway=gateway, store=ArtifactStore([tmp_path])),
    )
    assert result.details["scaled"] == {"need_alignment": 80, "content_depth": 60, "tone": 100, "explanation_style": 40}
    assert result.criteria["recall"] == pytest.approx(2 / 3)
    assert result.score == pytest.approx((80 + 60 + 100 + 40 + 200 / 3) / 5)
    assert result.details["feedback"]["tone"] == "tone feedback" and result.details["shots"] == 1
    evaluation = prompt(next(m for _, name, m in gateway.calls if name == "BespokeEvaluation"))
    assert "Content Depth score: 2" in evaluation and "Content Depth feedback: fb content_depth" in evaluation
    assert gateway.count("_Contained") == 3


def test_bespoke_empty_gold_list_scores_zero_recall_and_is_flagged(tmp_path) -> None:
    case = pdr_case(information_need="need", rj_pairs=BESPOKE_PAIRS)
    result = run(
        create_judge({"name": "bespoke"}),
        case,
        SystemResponse(text="x"),
        JudgeEnv(gateway=HandWritten(bespoke_answers({})), store=ArtifactStore([tmp_path])),
    )
    assert result.criteria["recall"] == 0.0 and "empty_gold" in result.flags
    assert result.score == pytest.approx((80 + 60 + 100 + 40 + 0) / 5)


# --------------------------------------------------------------------------- LaMP-QA


def test_lampqa_aspects_direct_and_pairwise_with_an_order_flip() -> None:
    aspects = [RubricAspect(aspect=f"aspect {i}", reason="r", evidence="e") for i in range(3)]
    case = pdr_case(narrative="My detailed question.", rubric_aspects=aspects)
    gateway = HandWritten(
        {
            "AspectMatch": lambda m, _s: {
                "match_score": {"aspect 0": 2, "aspect 1": 1, "aspect 2": 0}[
                    next(a for a in ("aspect 0", "aspect 1", "aspect 2") if a in prompt(m))
                ]
            },
            "DirectScore": {"score": 0.75},
            "PairwiseChoice": {"selected_response": "response_1"},  # always the first position
        }
    )
    env = JudgeEnv(gateway=gateway)
    aspect = run(create_judge({"name": "lampqa_aspects"}), case, SystemResponse(text="x"), env)
    assert aspect.score == pytest.approx((1 + 0.5 + 0) / 3)
    assert run(create_judge({"name": "lampqa_direct"}), case, SystemResponse(text="x"), env).score == 0.75
    pairwise = create_judge({"name": "lampqa_pairwise", "baseline": "b"})
    flip = asyncio.run(pairwise.judge_pair(case, SystemResponse(text="mine"), SystemResponse(text="theirs"), env))
    assert flip.score == 0.5 and flip.flags == ["order_flip"]
    orders = [prompt(m) for _, name, m in gateway.calls if name == "PairwiseChoice"]
    assert orders[0].index("mine") < orders[0].index("theirs") and orders[1].index("theirs") < orders[1].index("mine")
    consistent = HandWritten(
        {
            "PairwiseChoice": lambda m, _s: {
                "selected_response": "response_1"
                if prompt(m).index("mine") < prompt(m).index("theirs")
                else "response_2"
            }
        }
    )
    won = asyncio.run(
        pairwise.judge_pair(
            case, SystemResponse(text="mine"), SystemResponse(text="theirs"), JudgeEnv(gateway=consistent)
        )
    )
    assert won.score == 1.0 and won.flags == []
    assert pairwise.recipe_problems(["a"]) and not pairwise.recipe_problems(["a", "b"])


# --------------------------------------------------------------------------- AEPD


def test_aepd_reproduces_the_papers_figure_2_from_an_annotation() -> None:
    profile = [
        "My name is u.",
        "I am a researcher specializing in Conversational IR.",
        "I live in Japan.",
        "I am very busy in June 2025.",
    ]
    case = Case(
        id="ikat:1",
        benchmark="t",
        user_id="u",
        query=Query(text="Please tell me about SIGIR-AP 2025."),
        history=[PTKBStatement(id=f"p{i}", text=t) for i, t in enumerate(profile, start=1)],
    )
    words = lambda n, w: " ".join([w] * n)
    response = SystemResponse(text=" ".join([words(46, "overview"), words(65, "topics"), words(16, "xian")]))
    annotation = {
        "topic": "About SIGIR-AP 2025",
        "aspects": [
            {"aspect": "Overview", "profile_statements": [], "content": words(46, "overview")},
            {"aspect": "Topics of interest", "profile_statements": ["2"], "content": words(65, "topics")},
            {"aspect": "Location", "profile_statements": ["3"], "content": words(16, "xian")},
            {"aspect": "Submission format", "profile_statements": [], "content": ""},
            {"aspect": "Submission deadlines", "profile_statements": ["4"], "content": ""},
            {"aspect": "Review process", "profile_statements": [], "content": ""},
            {"aspect": "Registration fee", "profile_statements": [], "content": ""},
            {"aspect": "registration FEE", "profile_statements": [], "content": ""},  # a repeat: dropped
        ],
    }
    result = run(
        create_judge({"name": "aepd"}), case, response, JudgeEnv(gateway=HandWritten({"TurnAnnotation": annotation}))
    )
    # PP = 2/3, PP' = 3/7, NPP = (2/3 - 3/7) / (4/7) = 5/12; L_per = 40.5 < L_nonper = 46 -> NPCL 0
    assert result.criteria["npp"] == pytest.approx(5 / 12) and result.score == 0.0
    assert result.criteria["d_score"] == pytest.approx(0.3452, abs=1e-4)
    assert result.details["aspects"][1]["profile_ids"] == ["p2"] and result.details["repeated_aspects"] == [
        "registration FEE"
    ]
    assert result.details["spans_removed"] == 0 and result.degraded == []


# --------------------------------------------------------------------------- LoCoMo, PrefEval


def test_locomo_verdict_beside_f1_and_adversarial_refusal() -> None:
    case = Case(
        id="l1",
        benchmark="locomo",
        user_id="s",
        query=Query(text="When did she move?"),
        meta={"category": 2},
        gold=Gold(answer="7 May 2023"),
    )
    gateway = HandWritten(
        {
            "Correctness": {"reasoning": "same date", "verdict": "CORRECT"},
            "Refusal": {"reasoning": "asserts it", "verdict": "ANSWERED"},
        }
    )
    result = run(
        create_judge({"name": "locomo"}),
        case,
        SystemResponse(text="She moved on 7 May 2023"),
        JudgeEnv(gateway=gateway),
    )
    # 3 of 6 predicted tokens (she move on 7 may 2023) match the 3 gold ones: P 1/2, R 1
    assert result.score == 1.0 and result.criteria["f1"] == pytest.approx(2 * 0.5 * 1 / 1.5)
    adversarial = case.model_copy(
        update={
            "meta": {"category": 5},
            "gold": Gold(answer="Not mentioned in the conversation", adversarial_answer="Boston"),
        }
    )
    wrong = run(
        create_judge({"name": "locomo"}),
        adversarial,
        SystemResponse(text="She moved to Boston."),
        JudgeEnv(gateway=gateway),
    )
    assert wrong.score == 0.0 and wrong.criteria["f1"] == 0.0
    assert "Boston" in prompt(gateway.calls[-1][2])  # the judge is shown the tempting wrong answer


@pytest.mark.parametrize(
    ("acknowledges", "hallucinates", "violates", "helpful", "follows", "error", "calls"),
    [
        ("Yes", "No", "No", "Yes", 1.0, None, 4),
        ("Yes", "Yes", "Yes", "Yes", 0.0, "hallucinated_violation", 4),
        ("No", "Yes", "Yes", "Yes", 0.0, "unaware_violation", 3),  # hallucination is not asked without acknowledgement
        ("No", "No", "No", "No", 0.0, "unhelpful", 3),
    ],
)
def test_prefeval_checks_and_error_types(acknowledges, hallucinates, violates, helpful, follows, error, calls) -> None:
    case = pdr_case(preference="I am vegan.")
    check = lambda m, _s: {
        "explanation": "e",
        "answer": (hallucinates if "restatement" in prompt(m) else violates if "violate" in prompt(m) else helpful),
    }
    gateway = HandWritten(
        {"Acknowledgement": {"preference": "since you are vegan", "answer": acknowledges}, "Check": check}
    )
    result = run(create_judge({"name": "prefeval"}), case, SystemResponse(text="x"), JudgeEnv(gateway=gateway))
    assert (result.score, result.details["error"], len(gateway.calls)) == (follows, error, calls)


# --------------------------------------------------------------------------- repeats and failures


def test_repeats_give_a_mean_and_a_per_case_std_with_a_new_seed_each() -> None:
    case = pdr_case(narrative="n")
    gateway = HandWritten({"DirectScore": lambda _m, settings: {"score": [0.25, 0.75, 1][settings.seed]}})
    result = run(
        create_judge({"name": "lampqa_direct", "repeats": 3}), case, SystemResponse(text="x"), JudgeEnv(gateway=gateway)
    )
    assert result.repeats == 3 and result.score == pytest.approx(2 / 3)
    assert result.std == pytest.approx(0.381881, abs=1e-6)  # sample std of 0.25, 0.75, 1
    assert result.details["repeat_scores"] == [0.25, 0.75, 1]


def test_output_malformed_after_repair_fails_the_judgment_with_its_reason(cache_dir) -> None:
    broken = Gateway({"judge": ModelSettings(model="scripted?malformed_rate=1")})
    case = pdr_case(narrative="n")
    result = run(create_judge({"name": "lampqa_direct"}), case, SystemResponse(text="x"), JudgeEnv(gateway=broken))
    assert result.failed and result.score is None
    assert "no valid DirectScore after one repair" in result.error
    pqr = run(create_judge({"name": "pqr"}), case, SystemResponse(text="x"), JudgeEnv(gateway=broken))
    assert pqr.failed and "criteria generation failed" in pqr.error and pqr.score is None


def test_a_case_lacking_what_the_judge_needs_fails_with_what_is_missing() -> None:
    result = run(
        create_judge({"name": "lampqa_aspects"}),
        pdr_case(),
        SystemResponse(text="x"),
        JudgeEnv(gateway=HandWritten({})),
    )
    assert result.failed and "rubric aspects" in result.error


def test_plain_citations_without_a_hash_are_read_and_not_counted_as_mismatches(tmp_path) -> None:
    response = SystemResponse(text="Oslo [1].", citations=[Citation(source_id="a", url="https://a.example/oslo")])
    claims = [{"fact": "Oslo is the capital of Norway.", "ref_idx": "1", "url": ""}]
    env = JudgeEnv(
        gateway=HandWritten(pqr_answers(claims=claims)), web=serving(FakeWeb({"https://a.example/oslo": PAGE_A}))
    )
    result = run(create_judge({"name": "pqr", "axes": ["R"]}), pdr_case(), response, env)
    assert result.score == pytest.approx((10 + 10) / 2) and result.details["R"]["source_text_mismatches"] == 0


def test_every_judge_role_is_a_known_role_falling_back_to_judge() -> None:
    from atelier.agents.judges.base import JUDGES
    from atelier.agents.models.settings import JUDGE_ROLES, ROLE_FALLBACK

    roles = {role for _, cls in JUDGES.items() for role in cls.roles}
    assert roles <= set(JUDGE_ROLES) and all(ROLE_FALLBACK[role] == "judge" for role in JUDGE_ROLES)
    assert len(JUDGES.names()) == 8
