"""LaMP-QA aspect judge: each rubric aspect scored 0–2 by the judge model (the paper's Figure 12
prompt), normalised by 2 and averaged (Algorithm 1)."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from agents.gateway import Gateway
from agents.judges.base import Judge, JudgeConfig, JudgeResult, register_judge
from agents.prompts import Section, build_messages
from agents.response import SystemResponse
from benchmarks.case import Case, RubricAspect
from benchmarks.metrics.lampqa import lampqa_score

ROLE = (
    "You are a fair and insightful judge with exceptional reasoning and analytical abilities. Your task is to "
    "evaluate a user's question, a generated response to that question, and an aspect that is important to the "
    "user. Based on this information, identify if the aspect is addressed in the generated response. Provide a "
    "clear and accurate assessment."
)
INPUT_GUIDE = """- question: the question asked by the user.
- details: the detailed explanation of the question from the user.
- response: a generated response to the user's question
- aspect: the aspect that is important to the user, consisting of the following fields:
  - aspect: the title for the aspect.
  - reason: the reason that this aspect is important for the user.
  - evidence: the evidence from the user detailed explanation that the aspect extracted from."""
TASK = (
    "Output match_score: a score between 0 to 2 that indicates how well the generated response addresses this "
    "aspect, where: 0 means the response does not cover this aspect, 1 means the response somewhat covers this "
    "aspect, and 2 means the response covers this aspect very well."
)


class AspectMatch(BaseModel):
    match_score: Literal[0, 1, 2] = Field(description="0 not covered, 1 somewhat covered, 2 covered very well.")


class LampQAJudgeConfig(JudgeConfig):
    name: Literal["lampqa_aspects"] = "lampqa_aspects"
    details: Literal["auto", "narrative", "information_need"] = Field(
        default="auto",
        description="What stands in for the user's detailed explanation: the LaMP-QA narrative, the gold "
        "information need, or `auto` (narrative when present, else the information need).",
    )


def aspect_messages(question: str, details: str, response: str, aspect: RubricAspect) -> list[dict[str, str]]:
    aspect_text = f"- aspect: {aspect.aspect}\n- reason: {aspect.reason}\n- evidence: {aspect.evidence}"
    return build_messages(
        ROLE,
        [
            Section("your input", INPUT_GUIDE),
            Section("question", question),
            Section("details", details),
            Section("response", response, untrusted=True),
            Section("aspect", aspect_text),
        ],
        TASK,
    )


@register_judge
class LampQAAspectJudge(Judge):
    name = "lampqa_aspects"
    config_model = LampQAJudgeConfig

    def _details(self, case: Case) -> str:
        gold = case.gold
        if self.config.details == "narrative":
            return gold.narrative or ""
        if self.config.details == "information_need":
            return gold.information_need or ""
        return gold.narrative or gold.information_need or ""

    async def judge(self, case: Case, response: SystemResponse, gateway: Gateway) -> JudgeResult:
        aspects = case.gold.rubric_aspects
        if not aspects:
            return JudgeResult(judge=self.name, error=f"case {case.id} has no rubric aspects to judge against")
        details = self._details(case)
        matches = await asyncio.gather(
            *(
                gateway.structured(self.role, aspect_messages(case.query.text, details, response.text, a), AspectMatch)
                for a in aspects
            )
        )
        scores = [m.match_score for m in matches]
        return JudgeResult(
            judge=self.name,
            score=lampqa_score(scores),
            details={"aspects": [{"aspect": a.aspect, "match_score": s} for a, s in zip(aspects, scores)]},
        )
