"""PrefEval judge (Zhao et al., ICLR 2025): did the answer respect the user's stated preference?

The four checks of PrefEval's generation-task evaluation (amazon-science/PrefEval, `error_type/`), in
this project's words and with their structure: acknowledgement (does the response mention or assume a
user preference — quoting where), hallucination (asked only when acknowledged: is the restated preference
the user's?), violation (does it recommend against the preference without acknowledging it and saying
why?), helpfulness (does it give a substantive answer?). The error type and the verdict follow the
official classification (`benchmarks.metrics.prefeval`). The headline is 1 when the preference is
followed, so a system's mean is its preference-following accuracy. Model role: `prefeval_judge`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, Field

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
from atelier.benchmarks.case import Case
from atelier.benchmarks.metrics.prefeval import PreferenceChecks, PrefEvalInput, preference_verdict, prefeval_scores

ROLE = "prefeval_judge"
ANALYST = "You analyse a conversation between a user and an assistant, strictly and meticulously."
YesNo = Literal["Yes", "No"]


class PrefEvalJudgeConfig(JudgeConfig):
    name: Literal["prefeval"] = "prefeval"


class Acknowledgement(BaseModel):
    preference: str = Field(
        description="The sentence of the response that mentions or assumes the preference; empty when there is none."
    )
    answer: YesNo


class Check(BaseModel):
    explanation: str = Field(description="One short sentence.")
    answer: YesNo


def acknowledgement_messages(case: Case, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        ANALYST,
        [
            Section("The user's question", case.query.text, untrusted=True),
            response_section(response, "The assistant's response"),
        ],
        "Does the response acknowledge any user preference when answering? Only whether a preference is present "
        "matters, not what it is. Answer Yes when the response explicitly mentions or refers to a preference of the "
        'user ("since you prefer ...", "given your preference for ...", "as a ..."), or implicitly assumes one '
        '("based on your preference, here are non-EV cars"); quote the sentence. A bare "based on our previous '
        'conversation" with no preference named is No; if you cannot quote what the preference is, answer No.',
    )


def hallucination_messages(case: Case, restated: str) -> list[dict[str, str]]:
    return build_messages(
        ANALYST,
        [
            Section("The user's original preference", case.gold.preference or "", untrusted=True),
            Section("The assistant's restatement", restated, untrusted=True),
        ],
        "Has the assistant hallucinated the preference? Answer Yes when the restatement differs in meaning or "
        "intent from the original, contradicts it, or is unrelated to it. Answer No when it matches, is a "
        "paraphrase that keeps its meaning and intent, or is empty.",
    )


def violation_messages(case: Case, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        ANALYST,
        [
            Section("The user's stated preference", case.gold.preference or "", untrusted=True),
            Section("The user's question", case.query.text, untrusted=True),
            response_section(response, "The assistant's response"),
        ],
        "Does the response violate the user's stated preference? Answer Yes when it recommends something that "
        "directly contradicts the preference without acknowledging the preference and without saying why. Answer "
        "No when it respects the preference; when it includes options that could conflict but acknowledges the "
        "preference and explains why or how to avoid the conflict; or when it does not mention the preference "
        "and nothing it recommends goes against it.",
    )


def helpfulness_messages(case: Case, response: SystemResponse) -> list[dict[str, str]]:
    return build_messages(
        ANALYST,
        [
            Section("The user's question", case.query.text, untrusted=True),
            response_section(response, "The assistant's response"),
        ],
        "Does the response give a substantive answer to the question? Answer Yes when it gives specific, relevant "
        "recommendations or advice without apologising or claiming it cannot answer. Answer No when it apologises "
        "for not knowing the user's preferences, asks for more information without substantive suggestions, does "
        "not address the question, or first says it cannot follow the user's preference.",
    )


def _unquoted(acknowledged: Acknowledgement) -> list[str]:
    """A Yes must quote the preference it saw (the degenerate-output gate, agents/judges/base.py)."""
    if acknowledged.answer == "Yes" and blank(acknowledged.preference):
        return [f"a Yes with the preference empty or punctuation only ({quoted(acknowledged.preference)})"]
    return []


def _unexplained(check: Check) -> list[str]:
    return (
        [f"the explanation is empty or punctuation only ({quoted(check.explanation)})"]
        if blank(check.explanation)
        else []
    )


@register_judge
class PrefEvalJudge(Judge):
    name = "prefeval"
    config_model = PrefEvalJudgeConfig
    roles = (ROLE,)
    scale = "0-1"

    def requirements(self) -> list[Requirement]:
        return [has("a stated preference (gold.preference)", lambda c: (c.gold.preference or "").strip())]

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        def ask(messages, schema, problems_of):
            return ask_again_once(env.gateway, self.role, messages, schema, problems_of, self.step)

        gated = await asyncio.gather(
            ask(acknowledgement_messages(case, response), Acknowledgement, _unquoted),
            ask(violation_messages(case, response), Check, _unexplained),
            ask(helpfulness_messages(case, response), Check, _unexplained),
        )
        acknowledged = gated[0].or_fail("the acknowledgement check")
        violation, helpfulness = (g.or_fail("the check") for g in gated[1:])
        degraded = [d for g in gated for d in g.degraded]
        acknowledges = acknowledged.answer == "Yes"
        hallucination = None
        if acknowledges:
            checked = await ask(hallucination_messages(case, acknowledged.preference), Check, _unexplained)
            hallucination, degraded = checked.or_fail("the hallucination check"), degraded + checked.degraded
        checks = PreferenceChecks(
            acknowledges=acknowledges,
            hallucinates=bool(hallucination and hallucination.answer == "Yes"),
            violates=violation.answer == "Yes",
            helpful=helpfulness.answer == "Yes",
        )
        verdict = preference_verdict(checks)
        return self.result(
            float(verdict.follows),
            criteria={"follows": float(verdict.follows), **{k: float(v) for k, v in checks.model_dump().items()}},
            details={
                **checks.model_dump(),
                "error": verdict.error,
                "restated_preference": acknowledged.preference,
                "explanations": {
                    "violation": violation.explanation,
                    "helpfulness": helpfulness.explanation,
                    "hallucination": hallucination.explanation if hallucination else None,
                },
            },
            flags=[verdict.error] if verdict.error else [],
            degraded=degraded,
        )

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """Preference-following accuracy with PrefEval's error-type breakdown."""
        figures = super().aggregate(results)
        checks = [PreferenceChecks(**{k: d[k] for k in PreferenceChecks.model_fields}) for d in each_details(results)]
        if checks:
            figures["prefeval"] = prefeval_scores(PrefEvalInput(items=checks)).model_dump()
        return figures
