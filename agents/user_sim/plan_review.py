"""Plan review by the simulated user: before any researcher starts, the user sees the sub-topics a
deep-research system plans to research and accepts them or says what to research instead.

As with clarification answers, the user judges from its persona and hidden need alone, and nothing
it sends carries gold text (`GoldGuard`). The code holds the model's verdict to what a reviewer
can send: an edit with no usable sub-topic is taken as acceptance, an edit longer than the system
runs in parallel keeps its first sub-topics — each recorded as a fallback (`fallback`), never
passed over.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from agents.models.budgeted import ITEM_CHARS
from agents.models.gateway import Gateway
from agents.prompts import Section, build_messages
from agents.user_sim.disclosure import GoldGuard
from agents.user_sim.grounding import SIMULATOR_ROLE, STOP_TOKEN, user_sections
from benchmarks.case import Case

TASK = (
    "Before it starts, the assistant shows you the sub-topics it plans to research for your question. "
    "Review the plan as yourself:\n"
    "- accept it (accept = true) when its sub-topics cover what you are looking for;\n"
    "- otherwise set accept to false and list the sub-topics you want researched instead, at most "
    "{most}: keep the ones that matter to you, drop the ones that do not, add what is missing;\n"
    "- say in one sentence why, in your own words."
)


class PlanVerdict(BaseModel):
    accept: bool = Field(description="Whether to research the plan as shown.")
    subtopics: list[str] = Field(
        default_factory=list, description="When accept is false: the sub-topics to research instead."
    )
    reason: str = Field(default="", description="Why, in one sentence.")


@dataclass(frozen=True)
class SimulatedPlanReview:
    """The simulated user's review: accepted, or the sub-topics to research instead; why; and what
    the code had to change in the model's verdict (None: it was used as given)."""

    accept: bool
    subtopics: list[str]
    reason: str
    fallback: str | None = None
    redacted: int = 0  # gold spans cut by the guard

    def resume_value(self) -> dict[str, object]:
        """The plan review's resume value (`graphs.deep_research.review.PlanReview`)."""
        if self.accept:
            return {"accept": True, "reason": self.reason, "fallback": self.fallback}
        return {
            "accept": False,
            "subtopics": [{"title": title} for title in self.subtopics],
            "reason": self.reason,
            "fallback": self.fallback,
        }


def plan_review_messages(case: Case, subtopics: list[str], most: int, problem: str | None) -> list[dict[str, str]]:
    numbered = "\n".join(f"{i}. {title}" for i, title in enumerate(subtopics, start=1))
    sections = [*user_sections(case), Section("The assistant's research plan", numbered, untrusted=True)]
    if problem:
        sections.append(Section("Your last review could not be used", problem))
    return build_messages(SIMULATOR_ROLE, sections, TASK.format(most=most))


async def review_plan_as_user(
    gateway: Gateway,
    case: Case,
    subtopics: list[str],
    max_subtopics: int,
    *,
    problem: str | None = None,
    role: str = "user_sim",
    guard: GoldGuard | None = None,
) -> SimulatedPlanReview:
    verdict = await gateway.structured(role, plan_review_messages(case, subtopics, max_subtopics, problem), PlanVerdict)
    guard = guard or GoldGuard(case)
    reason = guard.scrub(verdict.reason.replace(STOP_TOKEN, "").strip(), also_shared=subtopics)
    redacted = reason.redacted
    if verdict.accept:
        return SimulatedPlanReview(True, [], reason.text, redacted=redacted)
    edited: list[str] = []
    for title in verdict.subtopics:
        scrubbed = guard.scrub(" ".join(title.replace(STOP_TOKEN, "").split())[:ITEM_CHARS], also_shared=subtopics)
        redacted += scrubbed.redacted
        text = scrubbed.text.strip(" .…-")
        if text and text.casefold() not in {e.casefold() for e in edited}:
            edited.append(text)
    if not edited:
        given = len(verdict.subtopics)
        empty = f"the simulated user rejected the plan but named no usable sub-topic ({given} given); it was researched as shown"
        return SimulatedPlanReview(True, [], reason.text, fallback=empty, redacted=redacted)
    fallback = None
    if len(edited) > max_subtopics:
        fallback = f"the simulated user's plan had {len(edited)} sub-topics; its first {max_subtopics} were researched"
        edited = edited[:max_subtopics]
    return SimulatedPlanReview(False, edited, reason.text, fallback=fallback, redacted=redacted)
