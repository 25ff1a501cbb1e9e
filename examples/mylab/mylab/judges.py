"""Strict: a judge of its own — does the response answer the question, and fit what the user said?

A judge is a subclass of `atelier.agents.judges.base.Judge`: a typed config (its `[[judges]]`
options), a declared `scale`, and `judge_once`, which asks its model through `env.gateway` and
returns `self.result(score, ...)`. A degenerate answer (empty reasoning) is asked once more with
`ask_again_once`, which records the re-ask; still degenerate, the judgment fails with its reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.judges.base import Judge, JudgeConfig, JudgeEnv, JudgeResult, ask_again_once, blank
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case


class StrictConfig(JudgeConfig):
    min_words: int = Field(default=20, ge=0, le=2000, description="A response shorter than this scores 0.")


REASONING = "Why, in two sentences."


class Verdict(BaseModel):
    reasoning: str = Field(description=REASONING)
    answers_question: bool
    fits_user: bool = Field(description="Whether it respects what the user's profile and need say.")


def degenerate(verdict: Verdict) -> list[str]:
    """What makes a verdict unusable: no reasoning, or the field's description echoed back (what
    SmolLM2-135M answers)."""
    if blank(verdict.reasoning):
        return ["empty reasoning"]
    if verdict.reasoning.strip() == REASONING:
        return ["the reasoning repeats the question's description instead of answering it"]
    return []


class Strict(Judge):
    name = "strict"
    config_model = StrictConfig
    scale = "0-1"
    config: StrictConfig

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        if len(response.text.split()) < self.config.min_words:
            return self.result(0.0, details={"reason": f"fewer than {self.config.min_words} words"})
        need = case.gold.information_need or case.query.text
        messages = build_messages(
            "You are a strict judge of answers written for one particular user.",
            [
                Section("The user's question", case.query.text),
                Section("What the user actually needs", need),
                Section("The response", response.text, untrusted=True),
            ],
            "Say whether the response answers the question, and whether it fits what the user needs.",
        )
        gated = await ask_again_once(
            env.gateway,
            self.role,
            messages,
            Verdict,
            degenerate,
            self.step,
        )
        verdict = gated.or_fail("the verdict")
        score = (verdict.answers_question + verdict.fits_user) / 2
        return self.result(
            score,
            criteria={"answers_question": float(verdict.answers_question), "fits_user": float(verdict.fits_user)},
            details={"reasoning": verdict.reasoning},
            degraded=gated.degraded,
        )
