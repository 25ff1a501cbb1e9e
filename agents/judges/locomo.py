"""LoCoMo QA judge: the answer against the reference, two ways side by side.

- F1: LoCoMo's own token F1 with its normalisation and per-category rules (`benchmarks.metrics.locomo`);
  for category 5 (adversarial) it is 1 when the answer says the thing is not mentioned.
- An LLM correctness verdict, in the generous grading convention used by LLM-judged LoCoMo results
  (Mem0 and later work): CORRECT when the answer refers to the same thing as the reference, even worded
  differently or with another date format; for category 5 the judge is shown the tempting wrong
  answer and checks that the response refuses it (says the conversation does not say) rather than
  asserting it or any other answer.
The headline is the verdict (1 correct, 0 wrong), so a system's mean is its LLM-judged accuracy.
Model role: `locomo_judge`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from atelier.agents.judges.base import (
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeFailed,
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
from atelier.benchmarks.case import Case
from atelier.benchmarks.metrics.locomo import locomo_f1

ROLE = "locomo_judge"
ADVERSARIAL = 5


class LocomoJudgeConfig(JudgeConfig):
    name: Literal["locomo"] = "locomo"


class Correctness(BaseModel):
    reasoning: str = Field(description="One sentence comparing the answer with the reference.")
    verdict: Literal["CORRECT", "WRONG"]


class Refusal(BaseModel):
    reasoning: str = Field(description="One sentence on what the answer asserts.")
    verdict: Literal["REFUSED", "ANSWERED"] = Field(
        description="REFUSED: it says the conversation does not tell; ANSWERED: it asserts an answer."
    )


def category(case: Case) -> int | None:
    value = case.meta.get("category")
    return value if value in (1, 2, 3, 4, 5) else None


def correctness_messages(case: Case, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        "You grade answers to questions about a long conversation between two people.",
        [
            Section("Question", case.query.text, untrusted=True),
            Section("Reference answer", case.gold.answer or "", untrusted=True),
            response_section(response, "Answer to grade"),
        ],
        "Label the answer CORRECT or WRONG against the reference. Be generous: it is CORRECT when it refers to "
        "the same thing as the reference, even if it is longer, worded differently, or gives a date or time in "
        "another format or relative form that means the same. It is WRONG when it names something else, "
        "contradicts the reference, or does not answer.",
    )


def refusal_messages(case: Case, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        "You grade answers to questions about a long conversation between two people.",
        [
            Section("Question", case.query.text, untrusted=True),
            Section("The tempting wrong answer", case.gold.adversarial_answer or "", untrusted=True),
            response_section(response, "Answer to grade"),
        ],
        "The conversation never says what this question asks; a good answer says so. Label the answer REFUSED "
        "when it says the conversation does not mention or answer this, and does not assert the tempting wrong "
        "answer or any other answer; label it ANSWERED otherwise.",
    )


def _degenerate(verdict: Refusal | Correctness) -> list[str]:
    """A verdict with no reasoning rests on nothing (the degenerate-output gate, agents/judges/base.py)."""
    return (
        [f"the reasoning is empty or punctuation only ({quoted(verdict.reasoning)})"]
        if blank(verdict.reasoning)
        else []
    )


@register_judge
class LocomoJudge(Judge):
    name = "locomo"
    config_model = LocomoJudgeConfig
    roles = (ROLE,)
    scale = "0-1"

    def requirements(self) -> list[Requirement]:
        return [
            has("a LoCoMo QA category 1-5 (meta.category)", category),
            has(
                "a reference answer (gold.answer), or for category 5 the adversarial answer",
                lambda c: c.gold.adversarial_answer if category(c) == ADVERSARIAL else (c.gold.answer or "").strip(),
            ),
        ]

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        kind = category(case)
        if kind is None:  # a requirement: `judge` does not call this for such a case
            raise JudgeFailed("the case has no LoCoMo QA category 1-5 (meta.category)")
        f1 = locomo_f1(response.text, case.gold.answer or "", kind)
        verdict: Refusal | Correctness
        if kind == ADVERSARIAL:
            refusal = await ask_again_once(
                env.gateway, self.role, refusal_messages(case, response), Refusal, _degenerate, self.step
            )
            verdict, degraded = refusal.or_fail("the verdict"), refusal.degraded
            correct = verdict.verdict == "REFUSED"
        else:
            correctness = await ask_again_once(
                env.gateway, self.role, correctness_messages(case, response), Correctness, _degenerate, self.step
            )
            verdict, degraded = correctness.or_fail("the verdict"), correctness.degraded
            correct = verdict.verdict == "CORRECT"
        return self.result(
            float(correct),
            criteria={"llm_correct": float(correct), "f1": f1},
            details={"category": kind, "verdict": verdict.verdict, "reasoning": verdict.reasoning, "f1": f1},
            degraded=degraded,
        )

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """LLM-judged accuracy and LoCoMo's F1 per category, as LoCoMo's tables report them."""
        figures = super().aggregate(results)
        by_category: dict[str, list[dict[str, Any]]] = {}
        for d in each_details(results):
            by_category.setdefault(str(d["category"]), []).append(d)
        figures["per_category"] = {
            category: {
                "n": len(items),
                "f1": sum(d["f1"] for d in items) / len(items),
                "llm_accuracy": sum(d["verdict"] in ("CORRECT", "REFUSED") for d in items) / len(items),
            }
            for category, items in sorted(by_category.items())
        }
        return figures
