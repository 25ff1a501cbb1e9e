"""Plan review (`review_plan = true`): the plan is shown before any researcher starts.

After the plan (design = "plan") or the supervisor's first research call (design = "agentic"), the
graph interrupts with a `PlanReviewRequest`; the resume value is a `PlanReview`: accept the plan
as shown, or give the sub-topics to research instead. A resume that cannot be used (another shape,
an empty or too long plan) is answered by asking again with what was wrong, as the clarify
interrupt does. A person reviews in Studio or a test (`clarify_answerer = "person"`); in a run
whose simulated user answers the system (`[user_sim] clarify = true`), the simulated user reviews
(`graphs.simulate.run_with_simulated_user`); with no one to answer, the plan is researched and the
review recorded as skipped. The request travels as plain data (`ask_as_data_until_usable`), so
Studio shows it as JSON and a checkpoint holds it without knowing its type.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field, model_validator

from atelier.agents.models.budgeted import ITEM_CHARS
from atelier.agents.planner import Subtopic
from atelier.benchmarks.common.degradation import degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.deep_research.agentic import agent_tasks
from atelier.graphs.deep_research.nodes import PIPELINE, options_of, research_tasks
from atelier.graphs.deep_research.state import DeepResearchState
from atelier.graphs.interrupts import ask_as_data_until_usable
from atelier.graphs.start import pipeline_context


class ReviewedTopic(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=ITEM_CHARS, description="The sub-topic to research.")
    why_for_user: str = Field(default="", description="Why it matters to this user.")
    queries: list[str] = Field(default_factory=list, description="Search queries (planned design); default: the title.")


class PlanReviewRequest(BaseModel):
    """What the reviewer is shown: the sub-topics about to be researched in parallel."""

    design: Literal["plan", "agentic"]
    subtopics: list[ReviewedTopic]
    max_subtopics: int
    instructions: str = (
        'Resume with {"accept": true} to research this plan, or {"accept": false, "subtopics": [{"title": ...}, ...]} '
        "to research an edited one."
    )
    problem: str | None = Field(default=None, description="What was wrong with the last answer, when it was unusable.")


class PlanReview(BaseModel):
    """The resume value: the plan accepted, or the plan to research instead."""

    model_config = ConfigDict(extra="forbid")

    accept: bool = True
    subtopics: list[ReviewedTopic] | None = None
    reason: str = Field(default="", max_length=2000, description="Why (kept in the response's meta).")
    fallback: str | None = Field(
        default=None,
        max_length=2000,
        description="Set by the simulated user when the code had to change its verdict to fit (a degraded step).",
    )

    @model_validator(mode="after")
    def _an_edit_has_a_plan(self) -> PlanReview:
        if not self.accept and not self.subtopics:
            raise ValueError("an edited plan (accept = false) needs at least one sub-topic")
        return self


def parse_review(value: Any, max_subtopics: int) -> PlanReview:
    review = value if isinstance(value, PlanReview) else PlanReview.model_validate(value)
    if review.subtopics and len(review.subtopics) > max_subtopics:
        raise ValueError(f"{len(review.subtopics)} sub-topics, at most {max_subtopics} researchers run in parallel")
    return review


def review_plan(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["researcher", "agent_researcher"]]:
    """Interrupt with the plan; research the plan accepted, or the one given instead."""
    options = options_of(runtime)
    shown = [ReviewedTopic.model_validate(topic) for topic in state.get("plan", [])]
    answerer = pipeline_context(runtime, PIPELINE).clarify_answerer
    if answerer == "none":  # a run with no one to review it
        review = PlanReview()
        status = {"status": "skipped", "reason": "no one reviews plans in this run (the plan was researched)"}
    else:
        request = PlanReviewRequest(design=options.design, subtopics=shown, max_subtopics=options.max_researchers)
        review = ask_as_data_until_usable(
            request,
            lambda value: parse_review(value, options.max_researchers),
            '{"accept": true} or {"accept": false, "subtopics": [{"title": "..."}]}',
        )
        status = {"status": "accepted" if review.accept else "edited", "by": answerer}
        if review.reason:
            status["reason"] = review.reason
    edited = review.subtopics if review.subtopics and not review.accept else None
    topics = edited or shown
    update: dict[str, Any] = {
        "plan": [t.model_dump() for t in topics],
        "plan_review": {**status, "subtopics": len(topics)},
    }
    if review.fallback:
        update["degraded"] = [*state.get("degraded", []), degradation("step_fallback", "review_plan", review.fallback)]
    round_ = state.get("round", 1)
    if options.design == "agentic":
        calls = state.get("pending_research", [])
        # the supervisor's calls answer with the edited topics' notes, in order; a topic added has no call
        update["pending_research"] = [
            {"id": calls[i]["id"] if i < len(calls) else "", "index": i, "topic": t.title} for i, t in enumerate(topics)
        ]
        dropped = [
            {"role": "tool", "tool_call_id": c["id"], "name": "conduct_research", "content": "Dropped at plan review."}
            for c in calls[len(topics) :]
        ]
        if dropped:
            update["supervisor_messages"] = [*state.get("supervisor_messages", []), *dropped]
        return Command(goto=agent_tasks(state, [t.title for t in topics], round_, options.max_recalls), update=update)
    subtopics = [
        Subtopic(title=t.title, why_for_user=t.why_for_user, queries=t.queries or [t.title[:ITEM_CHARS]])
        for t in topics
    ]
    return Command(goto=research_tasks(state, subtopics, round_), update=update)
