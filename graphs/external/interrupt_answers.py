"""How the simulated user answers a LangGraph server's `interrupt()`: the graph's own protocol.

A graph accepts the resume values it was written for. `resume_as` (an `agent = "langgraph"`
option) names the protocol; each maps the simulated user's answer, a typed value, to exactly the
resume value its graph takes:

- `answers` (the default): a clarify request (`{"questions": [...]}`, this project's
  `deep_research`) is answered `{"answers": [...]}`, one per question; any other value is asked as
  one question and answered with the text.
- `deerflow`: DeerFlow's plan review (`human_feedback_node`, its `interrupt("Please Review the
  Plan.")` while `auto_accepted_plan` is false): the user reviews the plan's steps (the thread's
  `current_plan`, a JSON string or object with `steps[].title`) as this project's plan review does
  (`agents.user_sim.plan_review`), and the verdict becomes `[ACCEPTED]` or `[EDIT_PLAN] <why>`
  followed by the steps to research instead — the only two values DeerFlow accepts (any other
  fails its run with "Interrupt value of ... is not supported"). The user reviews once, as it
  reviews `deep_research`'s plan: DeerFlow plans again from an edit and asks again, and that
  revision of the user's own steps is accepted (recorded so, `"by": "rule"`).

Each answer is recorded with the interrupt (`meta.interrupts`); where the code had to change the
user's verdict (a plan rejected with no usable step is taken as accepted), a `step_fallback`
degradation says so.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from atelier.agents.clarify import ClarifyRequest
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import call_tags
from atelier.agents.user_sim import answer_clarification
from atelier.agents.user_sim.plan_review import SimulatedPlanReview, review_plan_as_user
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import Degradation, degradation

ResumeAs = Literal["answers", "deerflow"]
DEERFLOW_ACCEPTED = "[ACCEPTED]"
DEERFLOW_EDIT = "[EDIT_PLAN]"
DEERFLOW_MAX_STEPS = 3  # DeerFlow's default max_step_num: the most steps an edited plan names


@dataclass
class Answered:
    """One interrupt's resume value, what the user's answer was, and what degraded in making it."""

    resume: Any
    answer: Any
    degraded: list[Degradation] = field(default_factory=list)


@dataclass
class Asker:
    """What a protocol answers with: the run's gateway and the case (the user's persona and need);
    and how many reviews the user has given in this episode."""

    gateway: Gateway
    case: Case
    reviews: int = 0


async def answer_questions(value: Any, thread_values: dict[str, Any], asker: Asker) -> Answered:
    """`answers`: a clarify request's questions answered one by one; any other value as one question."""
    if isinstance(value, dict) and isinstance(value.get("questions"), list):
        request = ClarifyRequest(questions=[str(q) for q in value["questions"]] or ["?"])
        single = False
    else:
        request = ClarifyRequest(questions=[value if isinstance(value, str) else str(value)])
        single = True
    with call_tags(node="interrupt"):
        answers = (await answer_clarification(asker.gateway, asker.case, request)).answers.answers
    resume = answers[0] if single else {"answers": answers}  # a clarify request's typed resume value
    return Answered(resume, resume)


def plan_steps(plan: Any) -> list[str]:
    """The step titles of a DeerFlow plan (`current_plan`: its JSON text, or the object)."""
    if isinstance(plan, str):
        try:
            plan = json.loads(plan.strip().removeprefix("```json").removeprefix("```").removesuffix("```"))
        except json.JSONDecodeError:
            return []
    steps = plan.get("steps") if isinstance(plan, dict) else None
    titles = [str(s.get("title") or s.get("description") or "").strip() for s in steps or [] if isinstance(s, dict)]
    return [t for t in titles if t]


def deerflow_resume(review: SimulatedPlanReview) -> str:
    """The resume value DeerFlow's `human_feedback_node` takes for the user's plan review."""
    if review.accept:
        return DEERFLOW_ACCEPTED
    steps = "\n".join(f"{n}. {title}" for n, title in enumerate(review.subtopics, 1))
    why = review.reason or "Research these steps instead."
    return f"{DEERFLOW_EDIT} {why}\nResearch these steps instead:\n{steps}"


async def review_deerflow_plan(value: Any, thread_values: dict[str, Any], asker: Asker) -> Answered:
    """`deerflow`: the plan in the thread's state reviewed by the simulated user (once)."""
    steps = plan_steps(thread_values.get("current_plan"))
    if asker.reviews:  # DeerFlow's revision of the user's own edit
        return Answered(DEERFLOW_ACCEPTED, {"accept": True, "by": "rule", "plan": steps})
    asker.reviews += 1
    degraded = []
    if not steps:
        shown = str(thread_values.get("current_plan") or value or "")[:500] or "(no plan in the thread's state)"
        degraded.append(
            degradation("step_fallback", "interrupt", "DeerFlow's plan had no readable steps: reviewed as one text")
        )
        steps = [shown]
    with call_tags(node="interrupt"):
        review = await review_plan_as_user(asker.gateway, asker.case, steps, max(DEERFLOW_MAX_STEPS, len(steps)))
    if review.fallback:
        degraded.append(degradation("step_fallback", "interrupt", review.fallback))
    verdict = {
        "accept": review.accept,
        "subtopics": review.subtopics,
        "reason": review.reason,
        "plan": steps,
        "by": "simulated_user",
    }
    return Answered(deerflow_resume(review), verdict, degraded)


PROTOCOLS: dict[str, Callable[[Any, dict[str, Any], Asker], Awaitable[Answered]]] = {
    "answers": answer_questions,
    "deerflow": review_deerflow_plan,
}
