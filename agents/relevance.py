"""History-session relevance: does this session help personalise the answer to THIS query?

BESPOKE's history selection (appendix C.3, Table 22): an LLM used cross-encoder style, one query
and one session per call, binary keep/reject. `judge_sessions_batch` asks about several sessions in
one call (cheaper; each verdict names its session id, and verdicts for ids not asked about are
dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, JsonValue, create_model

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages, conversation_section
from atelier.benchmarks.case import ConversationTurn

ROLE = "You are a strict reviewer selecting history sessions that help personalize the response to THIS query."
RULES = (
    "Explicit rule: If the session is related to the query and will help personalize the response to that "
    "query, you MUST accept it (set keep=true). If not, reject. Keep ONLY if the session includes "
    "user-specific signals that would concretely change what the assistant says for this exact query: stable "
    "preferences (likes/dislikes), explicit constraints (budget/time/access), background (role/skill/industry), "
    "environment/config, or prior choices relevant to this topic. If the history session is a past web "
    "search, it contains ONLY the search query string; judge relevance based on that query text alone "
    "(ignore any page content). Important: Accept indirectly related but decision changing constraints as "
    "adjacent constraints. For example, for a game recommendation query, searches like 'GeForce Now', "
    "'cloud gaming', 'Mac gaming', 'Steam Deck', 'low-end laptop', 'controller support', or 'RTX 3050 vs "
    "3060' indicate platform/performance/input constraints that filter or change recommended titles. Classify "
    "such items as adjacent constraint and keep them. Reject off-topic content or history unrelated to this "
    "query topic."
)
TASK_ONE = (
    "Given the user's query and ONE history session (a chat file or a single search line), decide if this "
    "session contains concrete, query-specific personalization signals. " + RULES
)
TASK_BATCH = (
    "Given the user's query and several history sessions (each a chat file or a single search line, headed by "
    "its label such as [S1]), decide for EACH session independently whether it contains concrete, query-specific "
    "personalization signals; give one verdict per session label. " + RULES
)

Signal = Literal[
    "stable_preference",
    "explicit_constraint",
    "background",
    "environment",
    "prior_choice",
    "adjacent_constraint",
    "none",
]


class SessionJudgment(BaseModel):
    keep: bool = Field(description="True if the session would concretely change the answer to this query.")
    signal: Signal = Field(description="The kind of personalization signal it carries (`none` if rejected).")
    reason: str = Field(description="One sentence on why.")


class SessionVerdict(SessionJudgment):
    session_id: str = Field(description="The label of the session judged, e.g. S1.")


class BatchJudgment(BaseModel):
    verdicts: list[SessionVerdict]


@lru_cache(maxsize=64)
def _batch_schema(size: int) -> type[BatchJudgment]:
    """BatchJudgment whose JSON schema lists the labels S1..S<size> as the allowed session ids.

    Only the schema is constrained: a label the model makes up still validates and is dropped,
    so a sloppy answer costs that verdict, not the whole call."""
    labels: list[JsonValue] = [f"S{i}" for i in range(1, size + 1)]
    verdict = create_model(
        f"SessionVerdictOf{size}",
        __base__=SessionVerdict,
        session_id=(str, Field(description="The label of the session judged.", json_schema_extra={"enum": labels})),
    )
    return create_model(f"BatchJudgmentOf{size}", __base__=BatchJudgment, verdicts=(list[verdict], ...))


def _query_sections(query: str, previous_turns: Sequence[ConversationTurn]) -> list[Section]:
    sections = [Section("Query", query)]
    if previous_turns:
        sections.append(conversation_section(previous_turns))
    return sections


async def judge_session(
    gateway: Gateway, role: str, query: str, session: str, previous_turns: Sequence[ConversationTurn] = ()
) -> SessionJudgment:
    sections = [*_query_sections(query, previous_turns), Section("History Session", session, untrusted=True)]
    return await gateway.structured(role, build_messages(ROLE, sections, TASK_ONE), SessionJudgment)


async def judge_sessions_batch(
    gateway: Gateway,
    role: str,
    query: str,
    sessions: Sequence[tuple[str, str]],
    previous_turns: Sequence[ConversationTurn] = (),
) -> dict[str, SessionJudgment]:
    """Verdicts by session id for `sessions` = (id, text). The prompt labels sessions S1, S2, ...
    (short labels the model can copy exactly); verdicts for labels not asked about are dropped,
    and a session with no verdict is absent (the caller treats it as not kept)."""
    labels = {f"S{i}": session_id for i, (session_id, _) in enumerate(sessions, start=1)}
    body = "\n\n".join(f"[{label}]\n{text}" for label, (_, text) in zip(labels, sessions))
    sections = [*_query_sections(query, previous_turns), Section("History Sessions", body, untrusted=True)]
    answer = await gateway.structured(role, build_messages(ROLE, sections, TASK_BATCH), _batch_schema(len(sessions)))
    verdicts: dict[str, SessionJudgment] = {}
    for verdict in answer.verdicts:
        session_id = labels.get(verdict.session_id.strip().strip("[]"))
        if session_id is not None and session_id not in verdicts:
            verdicts[session_id] = SessionJudgment(keep=verdict.keep, signal=verdict.signal, reason=verdict.reason)
    return verdicts


async def judge_sessions(
    gateway: Gateway,
    role: str,
    query: str,
    sessions: Sequence[tuple[str, str]],
    batch_size: int = 1,
    previous_turns: Sequence[ConversationTurn] = (),
) -> dict[str, SessionJudgment]:
    """Judge every session, one call per session (batch_size 1, as BESPOKE) or per batch; calls
    run concurrently (the gateway bounds how many reach a model at once)."""
    if batch_size <= 1:
        judgments = await asyncio.gather(
            *(judge_session(gateway, role, query, text, previous_turns) for _, text in sessions)
        )
        return {session_id: j for (session_id, _), j in zip(sessions, judgments)}
    batches = [sessions[i : i + batch_size] for i in range(0, len(sessions), batch_size)]
    results = await asyncio.gather(
        *(judge_sessions_batch(gateway, role, query, batch, previous_turns) for batch in batches)
    )
    return {session_id: j for result in results for session_id, j in result.items()}
