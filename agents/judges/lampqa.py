"""LaMP-QA judges (§3.2, Appendix C), all three evaluation modes of the paper:

- `lampqa_aspects`: each rubric aspect scored 0-2 (Figure 12), normalised by 2 and averaged
  (Algorithm 1) — the paper's metric;
- `lampqa_direct`: one aspect-free score for the response on five levels 0 to 1 (Figure 10);
- `lampqa_pairwise`: the response against a baseline system's response to the same question
  (Figure 11), judged in both orders; the score is the position-balanced win rate and a verdict
  that changes with the order is flagged `order_flip` (the paper found 78% such flips).

The user's "details" (the question narrative) are the LaMP-QA narrative, or the gold information need
for benchmarks that have no narrative. Model role: `lampqa_judge` (falls back to `judge`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, Field

from atelier.agents.judges.base import (
    ComparativeJudge,
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeResult,
    Requirement,
    each_details,
    has,
    register_judge,
)
from atelier.agents.judges.material import response_section
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case, RubricAspect
from atelier.benchmarks.metrics.lampqa import (
    PairwiseInput,
    check_direct_level,
    lampqa_score,
    pairwise_outcome,
    pairwise_summary,
)

ROLE = "lampqa_judge"
JUDGE_ROLE = "You are a fair and insightful judge with exceptional reasoning and analytical abilities."
QUESTION_GUIDE = """- question: the question asked by the user.
- details: the detailed explanation of the question from the user."""

Details = Literal["auto", "narrative", "information_need"]


class _LampQAConfig(JudgeConfig):
    details: Details = Field(
        default="auto",
        description="What stands in for the user's detailed explanation: the LaMP-QA narrative, the gold "
        "information need, or `auto` (narrative when present, else the information need).",
    )


def details_of(case: Case, choice: Details) -> str:
    gold = case.gold
    if choice == "narrative":
        return gold.narrative or ""
    if choice == "information_need":
        return gold.information_need or ""
    return gold.narrative or gold.information_need or ""


def details_requirement(choice: Details) -> Requirement:
    what = {
        "narrative": "a question narrative (gold.narrative)",
        "information_need": "a gold information need (gold.information_need)",
        "auto": "a question narrative or gold information need (gold.narrative / gold.information_need)",
    }[choice]
    return has(what, lambda case: details_of(case, choice).strip())


def question_sections(case: Case, choice: Details) -> list[Section]:
    return [
        Section("question", case.query.text, untrusted=True),
        Section("details", details_of(case, choice), untrusted=True),
    ]


# --------------------------------------------------------------------------- aspects (Figure 12)

ASPECT_TASK = (
    "Evaluate the user's question, the generated response, and an aspect that is important to the user, and "
    "decide how well the response addresses the aspect. Output match_score from 0 to 2: 0 the response does "
    "not cover this aspect, 1 it somewhat covers it, 2 it covers it very well."
)
ASPECT_GUIDE = (
    QUESTION_GUIDE
    + """
- response: a generated response to the user's question.
- aspect: the aspect that is important to the user: its title, the reason it matters to the user, and the \
evidence in the user's explanation it was drawn from."""
)


class AspectMatch(BaseModel):
    match_score: Literal[0, 1, 2] = Field(description="0 not covered, 1 somewhat covered, 2 covered very well.")


def aspect_messages(
    case: Case, choice: Details, response: SystemResponse, aspect: RubricAspect
) -> list[dict[str, str]]:
    aspect_text = f"- aspect: {aspect.aspect}\n- reason: {aspect.reason}\n- evidence: {aspect.evidence}"
    return build_messages(
        JUDGE_ROLE,
        [
            Section("your input", ASPECT_GUIDE),
            *question_sections(case, choice),
            response_section(response, "response"),
            Section("aspect", aspect_text, untrusted=True),
        ],
        ASPECT_TASK,
    )


class LampQAJudgeConfig(_LampQAConfig):
    name: Literal["lampqa_aspects"] = "lampqa_aspects"


@register_judge
class LampQAAspectJudge(Judge):
    name = "lampqa_aspects"
    case_specific_criteria = True  # aspect_i is the case's own i-th rubric aspect
    config_model = LampQAJudgeConfig
    roles = (ROLE,)
    scale = "0-1"
    config: LampQAJudgeConfig

    def requirements(self) -> list[Requirement]:
        return [has("rubric aspects (gold.rubric_aspects)", lambda case: case.gold.rubric_aspects)]

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        aspects = case.gold.rubric_aspects
        matches = await asyncio.gather(
            *(
                env.gateway.structured(self.role, aspect_messages(case, self.config.details, response, a), AspectMatch)
                for a in aspects
            )
        )
        scores = [m.match_score for m in matches]
        return self.result(
            lampqa_score(scores),
            criteria={f"aspect_{i}": s / 2 for i, s in enumerate(scores, start=1)},
            details={"aspects": [{"aspect": a.aspect, "match_score": s} for a, s in zip(aspects, scores)]},
        )


# --------------------------------------------------------------------------- direct (Figure 10)

DIRECT_CRITERIA = """Score 0: the response does not answer the user's question given the details.
Score 0.25: minimally relevant; it misses the core information needs in the details, may contain significant \
inaccuracies, overlooks key aspects, or stays superficial.
Score 0.5: partly correct; it addresses some important aspects but lacks completeness, precision or depth.
Score 0.75: mostly correct and largely satisfactory; it may not cover every aspect fully or optimally clearly.
Score 1: fully correct, clear and complete; it addresses all or nearly all important elements of the detailed \
question with accuracy, depth and clarity."""


class DirectScore(BaseModel):
    # pydantic takes float literals (an enum in the schema); the typing spec does not
    score: Literal[0, 0.25, 0.5, 0.75, 1] = Field(  # type: ignore[valid-type]
        description="0, 0.25, 0.5, 0.75 or 1, by the criteria."
    )


def direct_messages(case: Case, choice: Details, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        JUDGE_ROLE,
        [
            Section("your input", QUESTION_GUIDE + "\n- response: a generated response to the user's question."),
            Section("criteria", DIRECT_CRITERIA),
            *question_sections(case, choice),
            response_section(response, "response"),
        ],
        "Score the generated response by how well it addresses the information needs described in the user's "
        "detailed explanation of the question, following the criteria.",
    )


class LampQADirectConfig(_LampQAConfig):
    name: Literal["lampqa_direct"] = "lampqa_direct"


@register_judge
class LampQADirectJudge(Judge):
    name = "lampqa_direct"
    config_model = LampQADirectConfig
    roles = (ROLE,)
    scale = "0-1"
    config: LampQADirectConfig

    def requirements(self) -> list[Requirement]:
        return [details_requirement(self.config.details)]

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        answer = await env.gateway.structured(
            self.role, direct_messages(case, self.config.details, response), DirectScore
        )
        score = check_direct_level(float(answer.score))
        return self.result(score, criteria={"direct": score})


# --------------------------------------------------------------------------- pairwise (Figure 11)


class PairwiseChoice(BaseModel):
    selected_response: Literal["response_1", "response_2", "tie"] = Field(
        description="The response that best answers the question given the user's detailed explanation, or tie."
    )


def pairwise_messages(
    case: Case, choice: Details, first: SystemResponse, second: SystemResponse
) -> list[dict[str, str]]:
    return build_messages(
        JUDGE_ROLE,
        [
            Section(
                "your input",
                QUESTION_GUIDE + "\n- response 1: the first generated response.\n"
                "- response 2: the second generated response.",
            ),
            *question_sections(case, choice),
            response_section(first, "response 1"),
            response_section(second, "response 2"),
        ],
        "Select the response that better addresses the information needs described in the user's detailed "
        "explanation of the question: response_1, response_2, or tie.",
    )


class LampQAPairwiseConfig(_LampQAConfig):
    name: Literal["lampqa_pairwise"] = "lampqa_pairwise"
    baseline: str = Field(min_length=1, description="The system every other system's response is compared with.")


@register_judge
class LampQAPairwiseJudge(ComparativeJudge):
    name = "lampqa_pairwise"
    config_model = LampQAPairwiseConfig
    roles = (ROLE,)
    scale = "0-1"
    config: LampQAPairwiseConfig

    @property
    def baseline(self) -> str:
        return self.config.baseline

    def requirements(self) -> list[Requirement]:
        return [details_requirement(self.config.details)]

    async def judge_pair_once(
        self, case: Case, response: SystemResponse, other: SystemResponse, env: JudgeEnv
    ) -> JudgeResult:
        choice = self.config.details
        first, swapped = await asyncio.gather(
            env.gateway.structured(self.role, pairwise_messages(case, choice, response, other), PairwiseChoice),
            env.gateway.structured(self.role, pairwise_messages(case, choice, other, response), PairwiseChoice),
        )
        outcome = pairwise_outcome(first.selected_response, swapped.selected_response)
        return self.result(
            outcome.score,
            criteria={"win": outcome.score},
            details={
                "baseline": self.baseline,
                "first_order": first.selected_response,
                "swapped_order": swapped.selected_response,
                **outcome.model_dump(),
            },
            flags=["order_flip"] if outcome.flipped else [],
        )

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """The win rate against the baseline and how often swapping the order flipped the verdict."""
        pairs = [{"first": d["first_order"], "swapped": d["swapped_order"]} for d in each_details(results)]
        figures = super().aggregate(results)
        if pairs:
            figures["pairwise"] = pairwise_summary(PairwiseInput(pairs=pairs)).model_dump()
        return figures
