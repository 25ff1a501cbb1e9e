"""BESPOKE judge (§3.4, Appendix C): the user's own taste, learnt from their judged responses.

- Rubric: from the query's response-judgment (R-J) pairs a model derives the user's personalized 1-5
  rubric per criterion (Table 18); generated once per (query, R-J pairs, model), stored and reused.
  `rubric = "shipped"` uses the release's personalized rubric (`gold.rubric_aspects`) instead.
- E_p: a few-shot evaluator shown the R-J pairs as examples of this user's judgments (all of the
  query's pairs by default, the paper's D_q; `shots` caps them), the rubric and the gold information
  need, rates need alignment, content depth, tone and explanation style 1-5 with diagnostic feedback
  (Table 19). Reported x20 on 0-100 (`benchmarks.metrics.bespoke`).
- E_r: each gold atomic claim is checked for being contained in the response without contradiction
  (Table 17); recall = share contained. An empty gold list scores 0.0 and is flagged `empty_gold`.
The headline is the paper's Table 4 "Avg.": the four criteria and recall x 100, averaged.
Roles: `bespoke_rubric`, `bespoke_judge` (E_p), `bespoke_recall` (E_r); each falls back to `judge`.

Degenerate output: E_p's reasoning or feedback on any criterion empty or punctuation only is asked
again once (a `judge_output_gated` degradation); still so, the judgment fails with the reason.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from atelier.agents.judges.base import (
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeResult,
    Requirement,
    ask_again_once,
    blank,
    each_details,
    has,
    quoted,
    register_judge,
)
from atelier.agents.judges.material import response_section
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case, RJPair
from atelier.benchmarks.metrics.bespoke import BESPOKE_CRITERIA, BespokeInput, bespoke_scores

ROLE_RUBRIC = "bespoke_rubric"
ROLE_EVALUATOR = "bespoke_judge"
ROLE_RECALL = "bespoke_recall"
PROMPT_VERSION = "bespoke-1"

CRITERION_TITLES = {
    "need_alignment": "Need Alignment",
    "content_depth": "Content Depth",
    "tone": "Tone",
    "explanation_style": "Explanation Style",
}
# Table 18's base scale, in this project's words.
BASE_SCALE = """Need alignment:
1 irrelevant to what the user actually wants to know; 2 on topic but mostly secondary details; 3 generic, \
not reflecting the user's specific interests; 4 the core interests with minor drift; 5 exactly the concepts \
and perspectives the user is most curious about.
Content depth:
1 completely mismatched depth; 2 too hard to follow or too basic to be of value; 3 understandable but \
noticeably mismatched; 4 a good match that could be slightly deeper or simpler; 5 exactly the user's level.
Tone:
1 uncomfortable or offensive to the user; 2 a disliked tone dominates; 3 functional but robotic or distant; \
4 close to the preferred tone with a few awkward expressions; 5 exactly the user's preferred tone.
Explanation style:
1 incompatible with how the user learns; 2 structure or style hard for them to absorb; 3 understandable but \
more effort than preferred; 4 mostly the preferred way, minor clarity issues; 5 exactly the methods easiest \
for the user (analogies, summaries, bullets, steps...)."""


class BespokeJudgeConfig(JudgeConfig):
    name: Literal["bespoke"] = "bespoke"
    rubric: Literal["generate", "shipped"] = Field(
        default="generate",
        description="Derive the personalized rubric from the R-J pairs (the paper's process), "
        "or use the case's shipped rubric (gold.rubric_aspects, BESPOKE's personalized_rubric table).",
    )
    shots: int | None = Field(default=None, ge=1, description="Judged responses shown as examples (default: all).")
    feedback_in_shots: bool = Field(default=True, description="false: scores only (the paper's w/o Feedback baseline).")
    recall: bool = Field(default=True, description="Also judge gold-information recall.")
    reuse_rubric: bool = Field(default=True, description="Generate the rubric once per query and reuse it.")


def shots(pairs: list[RJPair], limit: int | None) -> list[tuple[str, list[RJPair]]]:
    """The R-J pairs grouped by response (a shot is one response with its judgments), in order."""
    grouped: dict[str, list[RJPair]] = {}
    for pair in pairs:
        grouped.setdefault(pair.response, []).append(pair)
    return list(grouped.items())[:limit]


def shots_text(grouped: list[tuple[str, list[RJPair]]], with_feedback: bool) -> str:
    blocks = []
    for i, (response, judgments) in enumerate(grouped, start=1):
        lines = [f"## Example {i}", f"Response: {response}"]
        for j in judgments:
            title = CRITERION_TITLES.get(j.criterion or "", j.criterion or "Overall")
            lines.append(f"{title} score: {j.score if j.score is not None else '-'}")
            if with_feedback and j.feedback:
                lines.append(f"{title} feedback: {j.feedback}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# --------------------------------------------------------------------------- rubric (Table 18)


class _Rubric(BaseModel):
    analysis: str = Field(description="What the user's judgments reveal about their standards.")
    need_alignment: str = Field(description="The user's rubric for need alignment: what earns 1, 2, 3, 4 and 5.")
    content_depth: str = Field(description="The user's rubric for content depth: what earns 1 to 5.")
    tone: str = Field(description="The user's rubric for tone: what earns 1 to 5.")
    explanation_style: str = Field(description="The user's rubric for explanation style: what earns 1 to 5.")


def rubric_messages(case: Case, grouped: list[tuple[str, list[RJPair]]], with_feedback: bool) -> list[dict[str, str]]:
    return build_messages(
        "You are an expert annotator who derives one user's personalized evaluation rubric from the way they "
        "judged earlier responses.",
        [
            Section("The query", case.query.text, untrusted=True),
            Section("The user's judgments of responses to it", shots_text(grouped, with_feedback), untrusted=True),
            Section("Base scale for each criterion (1-5)", BASE_SCALE),
        ],
        "All these judgments were made by one person, on four criteria from 1 to 5. Infer their implicit "
        "standards, then write their personalized rubric: for each criterion, concise and actionable guidance "
        "for every score from 1 to 5.",
    )


def shipped_rubric(case: Case) -> dict[str, Any]:
    return {"analysis": "", "text": "\n".join(a.aspect for a in case.gold.rubric_aspects), "source": "shipped"}


def rubric_text(rubric: dict[str, Any]) -> str:
    if rubric.get("text"):
        return rubric["text"]
    return "\n".join(f"{CRITERION_TITLES[c]}:\n{rubric[c]}" for c in BESPOKE_CRITERIA)


# --------------------------------------------------------------------------- E_p (Table 19)


class _CriterionJudgment(BaseModel):
    reasoning: str = Field(
        description="Step by step: key elements of the response, compared with the examples and "
        "the gold need, against the rubric."
    )
    score: int = Field(ge=1, le=5, description="Integer 1-5.")
    feedback: str = Field(description="Concise, actionable feedback in the style of the examples.")


_EVALUATION_FIELDS: dict[str, Any] = {c: (_CriterionJudgment, ...) for c in BESPOKE_CRITERIA}
EVALUATION = create_model("BespokeEvaluation", **_EVALUATION_FIELDS)


def evaluation_problems(evaluation: BaseModel) -> list[str]:
    """What in E_p's output no score can rest on: a criterion's reasoning or feedback that is empty or
    punctuation only (SmolLM2 answered `","`)."""
    problems = []
    for criterion in BESPOKE_CRITERIA:
        judged = getattr(evaluation, criterion)
        for part in ("reasoning", "feedback"):
            text = getattr(judged, part)
            if blank(text):
                problems.append(
                    f"the {part} on {CRITERION_TITLES[criterion].lower()} is empty or punctuation only ({quoted(text)})"
                )
    return problems


def evaluation_messages(
    case: Case,
    response: SystemResponse,
    rubric: dict[str, Any],
    grouped: list[tuple[str, list[RJPair]]],
    with_feedback: bool,
) -> list[dict[str, str]]:
    return build_messages(
        "You evaluate responses exactly like the specific person who judged the examples: replicate their "
        "preferences, their strictness or leniency, their usual score levels and their feedback style.",
        [
            Section("Personalized rubric for this user and query", rubric_text(rubric), untrusted=True),
            Section("The user's query", case.query.text, untrusted=True),
            Section("The user's gold information need", case.gold.information_need or "", untrusted=True),
            Section("Examples of this user's judgments", shots_text(grouped, with_feedback), untrusted=True),
            response_section(response, "The response to evaluate"),
        ],
        "Take the gold information need as the user's underlying intent and the primary reference. For each of "
        "need alignment, content depth, tone and explanation style: identify the key elements of the response, "
        "compare them with the examples and the need, score it from 1 to 5 (integers only) with the rubric, and "
        "give concise feedback that mirrors the examples' language, politeness and length. Where the examples "
        "show leniency or strictness on a criterion, apply it the same way.",
    )


# --------------------------------------------------------------------------- E_r (Table 17)


class _Contained(BaseModel):
    contained: bool = Field(description="true if the response contains the claim's core meaning, uncontradicted.")


def recall_messages(claim: str, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        "You are a precise fact checker.",
        [Section("Claim", claim, untrusted=True), response_section(response, "Response")],
        "Decide whether the response contains the claim's core meaning. It counts as contained when it is "
        "semantically equivalent even in other words; it does not count when it is absent or contradicted.",
    )


@register_judge
class BespokeJudge(Judge):
    name = "bespoke"
    config_model = BespokeJudgeConfig
    roles = (ROLE_EVALUATOR, ROLE_RUBRIC, ROLE_RECALL)
    scale = "0-100"
    preparation = "rubric generation"
    config: BespokeJudgeConfig

    def requirements(self) -> list[Requirement]:
        needs = [
            has("a gold information need (gold.information_need)", lambda c: (c.gold.information_need or "").strip()),
            has("response-judgment pairs (gold.rj_pairs)", lambda c: c.gold.rj_pairs),
        ]
        if self.config.rubric == "shipped":
            needs.append(
                has(
                    "a shipped rubric (gold.rubric_aspects), needed by rubric='shipped'",
                    lambda c: c.gold.rubric_aspects,
                )
            )
        return needs

    async def rubric(
        self, case: Case, grouped: list[tuple[str, list[RJPair]]], env: JudgeEnv
    ) -> tuple[dict[str, Any], str | None]:
        if self.config.rubric == "shipped":
            return shipped_rubric(case), None
        messages = rubric_messages(case, grouped, self.config.feedback_in_shots)

        async def create() -> dict[str, Any]:
            generated = await env.gateway.structured(ROLE_RUBRIC, messages, _Rubric)
            return {**generated.model_dump(), "source": "generated"}

        identity = {"version": PROMPT_VERSION, "messages": messages, "model": env.model_identity(ROLE_RUBRIC)}
        return await env.generated_once("bespoke_rubric", identity, create, self.config.reuse_rubric)

    async def prepare(self, case: Case, env: JudgeEnv) -> tuple[dict[str, Any], str | None]:
        """One rubric per query, shared by every repeat and every system."""
        return await self.rubric(case, shots(case.gold.rj_pairs, self.config.shots), env)

    async def judge_once(
        self,
        case: Case,
        response: SystemResponse,
        env: JudgeEnv,
        prepared: tuple[dict[str, Any], str | None] | None = None,
    ) -> JudgeResult:
        grouped = shots(case.gold.rj_pairs, self.config.shots)
        rubric = prepared if prepared is not None else await self.prepare(case, env)
        return await self.evaluate(case, response, grouped, rubric, env)

    async def evaluate(
        self,
        case: Case,
        response: SystemResponse,
        grouped: list[tuple[str, list[RJPair]]],
        rubric: tuple[dict[str, Any], str | None],
        env: JudgeEnv,
    ) -> JudgeResult:
        found, key = rubric
        claims = case.gold.information_claims if self.config.recall else []
        gated, contained = await asyncio.gather(
            ask_again_once(
                env.gateway,
                ROLE_EVALUATOR,
                evaluation_messages(case, response, found, grouped, self.config.feedback_in_shots),
                EVALUATION,
                evaluation_problems,
                self.step,
            ),
            asyncio.gather(
                *(env.gateway.structured(ROLE_RECALL, recall_messages(claim, response), _Contained) for claim in claims)
            ),
        )
        evaluation = gated.or_fail("the evaluation")
        judged = {c: getattr(evaluation, c) for c in BESPOKE_CRITERIA}
        scores = bespoke_scores(
            BespokeInput.model_validate(
                {
                    "ratings": {c: j.score for c, j in judged.items()},
                    "gold_information": [
                        {"claim": claim, "present": v.contained} for claim, v in zip(claims, contained)
                    ]
                    if self.config.recall
                    else None,
                }
            )
        )
        criteria: dict[str, float | None] = {c: float(j.score) for c, j in judged.items()}
        criteria["recall"] = scores.recall
        return self.result(
            scores.average if scores.average is not None else scores.personalization,
            criteria=criteria,
            details={
                "scaled": scores.criteria,
                "personalization": scores.personalization,
                "recall": scores.recall,
                "feedback": {c: j.feedback for c, j in judged.items()},
                "reasoning": {c: j.reasoning for c, j in judged.items()},
                "gold_information": [{"claim": claim, "present": v.contained} for claim, v in zip(claims, contained)],
                "empty_gold": scores.empty_gold,
                "shots": len(grouped),
                "rubric_source": found["source"],
                "rubric_key": key,
                "score_is": "mean of the four criteria x20 and recall x100 (Table 4 Avg.)"
                if scores.average is not None
                else "mean of the four criteria x20",
            },
            flags=["empty_gold"] if scores.empty_gold else [],
            degraded=gated.degraded,
        )

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """Table 4's columns: each criterion on 0-100, recall in percent, and their average."""
        figures = super().aggregate(results)
        details = each_details(results)
        if details:
            columns = {c: sum(d["scaled"][c] for d in details) / len(details) for c in BESPOKE_CRITERIA}
            recalls = [d["recall"] for d in details if d["recall"] is not None]
            if recalls:
                columns["recall"] = 100 * sum(recalls) / len(recalls)
            columns["average"] = sum(columns.values()) / len(columns)
            figures["table"] = columns
            figures["empty_gold"] = sum(d["empty_gold"] for d in details)
        return figures


# --------------------------------------------------------------------------- feedback meta-evaluation (Table 20)


class FeedbackVerdict(BaseModel):
    decision: Literal["O", "X"] = Field(
        description="O: the generated feedback reasonably emulates the human's; X: not."
    )


def feedback_messages(
    criterion: str, case: Case, response: str, rubric: str, human: str, generated: str
) -> list[dict[str, str]]:
    """The meta-judge of `atelier meta-eval --feedback` (role `meta_judge`)."""
    title = CRITERION_TITLES.get(criterion, criterion).lower()
    return build_messages(
        f"You decide whether a generated feedback evaluates a response's {title} the way the author of a human "
        "feedback would.",
        [
            Section("Query", case.query.text, untrusted=True),
            Section("Gold information need", case.gold.information_need or "", untrusted=True),
            response_section(response, "Response"),
            Section("Rubric", rubric, untrusted=True),
            Section("Human feedback (the reference)", human, untrusted=True),
            Section("Generated feedback (to judge)", generated, untrusted=True),
        ],
        "Judge human-likeness: does the generated feedback reflect the human's perspective (main priorities, "
        "focus, overall severity or leniency), keep the key issues and praise the human stressed (minor "
        "differences or extra nuance are fine if they do not distort the human's intent), and stay accurate and "
        "grounded in the query, need and response? Answer O when it reasonably emulates the human evaluator "
        "overall, X otherwise.",
    )
