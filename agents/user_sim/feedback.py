"""Feedback: the simulated user rates a response on BESPOKE's four criteria, 1–5 with diagnostic
feedback (BESPOKE §3.3), from its persona and hidden need.

A rated response becomes response–judgment pairs (`RJPair`, one per criterion, as BESPOKE's
annotators give them), so benchmarks without human R-J pairs can feed the BESPOKE judge.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.user_sim.grounding import SIMULATOR_ROLE, user_sections
from atelier.benchmarks.case import Case, RJPair
from atelier.benchmarks.metrics.bespoke import BESPOKE_CRITERIA

CRITERIA_GUIDE = (
    "- need_alignment: how well the response captures your information need — whether it directly addresses "
    "what you want while avoiding irrelevant information.\n"
    "- content_depth: the level of detail and complexity — whether it is as thorough, concise or advanced as "
    "you expect for this question.\n"
    "- tone: how well its tone (formal, casual, ...) matches what you like.\n"
    "- explanation_style: whether its structure, flow and illustrative methods (step-by-step guidance, "
    "examples, ...) fit the way you prefer to understand information."
)
TASK = (
    "Judge the response above as yourself, on each of the four criteria: a score from 1 (not at all what you "
    "wanted) to 5 (exactly what you wanted), and diagnostic feedback — two or three sentences naming what in the "
    "response fits you or deviates from what you expected, and what you would have wanted instead."
)


class CriterionJudgment(BaseModel):
    score: int = Field(ge=1, le=5, description="1 (not at all) to 5 (exactly what you wanted).")
    feedback: str = Field(min_length=1, description="What fits you or deviates from your expectations, and why.")


class UserFeedback(BaseModel):
    need_alignment: CriterionJudgment
    content_depth: CriterionJudgment
    tone: CriterionJudgment
    explanation_style: CriterionJudgment

    def judgments(self) -> dict[str, CriterionJudgment]:
        return {name: getattr(self, name) for name in BESPOKE_CRITERIA}

    def rj_pairs(self, response: str) -> list[RJPair]:
        """One R-J pair per criterion, as BESPOKE's annotators give them."""
        return [
            RJPair(response=response, score=j.score, feedback=j.feedback, criterion=name)
            for name, j in self.judgments().items()
        ]


def feedback_messages(case: Case, response: str) -> list[dict[str, str]]:
    sections = [
        *user_sections(case),
        Section("The criteria", CRITERIA_GUIDE),
        Section("The assistant's response", response, untrusted=True),
    ]
    return build_messages(SIMULATOR_ROLE, sections, TASK)


async def rate_response(gateway: Gateway, case: Case, response: str, role: str = "user_sim") -> UserFeedback:
    return await gateway.structured(role, feedback_messages(case, response), UserFeedback)
