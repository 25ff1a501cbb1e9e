"""Plan review by the simulated user: before any researcher starts, the user sees the sub-topics a
deep-research system plans to research and accepts them or says what to research instead.

As with clarification answers, the user judges from its persona and hidden need alone, and nothing
it sends carries gold text (`GoldGuard`). The code holds the model's verdict to what a reviewer
can send: an edit with no usable sub-topic is taken as acceptance, an edit longer than the system
runs in parallel keeps its first sub-topics, and a reason or sub-topic that only repeats the request
(a weak model echoing the schema's descriptions) is dropped — each recorded as a fallback
(`fallback`), never passed over.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from atelier.agents.models.budgeted import ITEM_CHARS
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.user_sim.disclosure import GoldGuard
from atelier.agents.user_sim.grounding import SIMULATOR_ROLE, STOP_TOKEN, user_sections
from atelier.agents.user_sim.protocol import ContentRules
from atelier.benchmarks.case import Case

TASK = (
    "Before it starts, the assistant shows you the sub-topics it plans to research for your question. "
    "Review the plan as yourself:\n"
    "- accept it (accept = true) when its sub-topics cover what you are looking for;\n"
    "- otherwise set accept to false and list the sub-topics you want researched instead, at most "
    "{most}: keep the ones that matter to you, drop the ones that do not, add what is missing;\n"
    "- say in one sentence why, in your own words."
)


REASON_CHARS = 500  # a reason (and what was changed) kept in the review; the resume value allows 2,000


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


def _request_rules(max_subtopics: int) -> ContentRules:
    """What a verdict's texts are checked against: the schema's names and descriptions and the task,
    which a weak model copies into the fields instead of answering."""
    schema = PlanVerdict.model_json_schema()
    properties = schema.get("properties", {})
    texts = [schema.get("title", ""), *properties, *(p.get("description", "") for p in properties.values())]
    return ContentRules(schema_texts=tuple(t for t in texts if t), prompt_texts=(TASK.format(most=max_subtopics),))


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
    rules = _request_rules(max_subtopics)
    changed: list[str] = []  # what the code had to change in the verdict: recorded, never passed over
    scrubbed_reason = guard.scrub(verdict.reason.replace(STOP_TOKEN, "").strip(), also_shared=subtopics)
    reason, redacted = scrubbed_reason.text[:REASON_CHARS], scrubbed_reason.redacted
    if echo := rules.echo(reason):
        changed.append(f"its reason was dropped: {echo}")
        reason = ""
    if verdict.accept:
        return SimulatedPlanReview(True, [], reason, fallback=_joined(changed), redacted=redacted)
    edited: list[str] = []
    for title in verdict.subtopics:
        scrubbed = guard.scrub(" ".join(title.replace(STOP_TOKEN, "").split())[:ITEM_CHARS], also_shared=subtopics)
        redacted += scrubbed.redacted
        text = scrubbed.text.strip(" .…-")
        if text and (echo := rules.echo(text)):
            changed.append(f"a sub-topic was dropped: {echo}")
        elif text and text.casefold() not in {e.casefold() for e in edited}:
            edited.append(text)
    if not edited:
        given = len(verdict.subtopics)
        changed.append(
            f"it rejected the plan but named no usable sub-topic ({given} given); it was researched as shown"
        )
        return SimulatedPlanReview(True, [], reason, fallback=_joined(changed), redacted=redacted)
    if len(edited) > max_subtopics:
        changed.append(f"its plan had {len(edited)} sub-topics; its first {max_subtopics} were researched")
        edited = edited[:max_subtopics]
    return SimulatedPlanReview(False, edited, reason, fallback=_joined(changed), redacted=redacted)


def _joined(changed: list[str]) -> str | None:
    text = f"the simulated user's plan review: {'; '.join(changed)}"
    return (text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…") if changed else None
