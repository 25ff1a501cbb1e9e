"""Counterfactual controls in an episode: the leak check of a control's answer.

A control episode (`EpisodeContext.control`; benchmarks/controls.py) runs the system on another
context — `graphs.inputs.case_view` gives its system and its memory the control's view — while its
judges read the case's own user and gold. Its answer is then checked for facts of the case's own
user that nothing it was given holds (`benchmarks.metrics.leakage`): each one found is a
`context_leak`, recorded with the response's degraded steps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.metrics.leakage import leaks
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import case_view, control_plan
from atelier.graphs.resources import resources_for
from atelier.memory.base import UserContext

LEAKS_SHOWN = 3  # leaked facts named in the degradation's detail


def given_texts(case: Case, context: EpisodeContext, response: SystemResponse, user_context: Any) -> list[str]:
    """What the control episode's system was legitimately given: the control's view (its history and
    persona, the query with the conversation so far), what its memory recalled (upfront and through
    its tool), what the simulated user said, and the texts of the sources it cites."""
    view = case_view({"benchmark": case.benchmark, "case_id": case.id}, context)
    texts = [view.query.text, *(t.utterance for t in view.query.previous_turns), *(e.render() for e in view.history)]
    if isinstance(user_context, UserContext) and user_context.text:
        texts.append(user_context.text)
    meta = response.meta
    texts += [str(r.get("text") or "") for r in meta.get("recalled_memory") or [] if isinstance(r, dict)]
    texts += [str(t.get("user") or "") for t in (meta.get("conversation") or {}).get("turns") or []]
    texts += [str(a) for a in (meta.get("clarify") or {}).get("answers") or []]
    sources = resources_for(context).sources
    for citation in response.citations:
        if citation.sha256:
            try:
                texts.append(sources.get(citation.sha256))
            except (OSError, LookupError):  # unreadable: the check then knows less given, never fewer leaks
                continue
    return texts


def leak_degradation(
    case: Case, context: EpisodeContext, response: SystemResponse, user_context: Any = None
) -> Degradation | None:
    """A `context_leak` naming the facts of the case's own user the control's answer mentions and
    nothing it was given holds; None when there are none (or the episode is no control)."""
    control = context.control
    if control is None:
        return None
    found = leaks(
        control_plan(case, context).facts,
        case.user_id,
        response.text,
        given_texts(case, context, response, user_context),
    )
    if not found:
        return None
    shown = "; ".join(f"{leak.phrase!r} ({leak.source})" for leak in found[:LEAKS_SHOWN])
    more = f" and {len(found) - LEAKS_SHOWN} more" if len(found) > LEAKS_SHOWN else ""
    return degradation(
        "context_leak",
        f"control:{control.kind}",
        f"{len(found)} fact(s) of user {case.user_id} that the {control.kind} context did not hold: {shown}{more}",
        count=len(found),
    )


async def checked_for_leaks(
    case: Case, context: EpisodeContext, response: SystemResponse, user_context: Any = None
) -> SystemResponse:
    """`response`, with a `context_leak` among its degraded steps when a control's answer leaks."""
    if context.control is None:
        return response
    leak = await asyncio.to_thread(leak_degradation, case, context, response, user_context)
    return response if leak is None else response.model_copy(update={"degraded": [*response.degraded, leak]})
