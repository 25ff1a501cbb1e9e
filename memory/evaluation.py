"""History-retrieval evaluation: how well a memory backend's `event_ids` rank the gold relevant events.

Every backend can be evaluated: a ranking backend's order is its ranking; any other backend is
scored on the order of the event ids it returns (a profile's cited events first, ...). Each user's
history is ingested once (the union over that user's cases, as the system's `CaseView` shows it),
then every case with gold relevant history is recalled and scored by trec_eval
(`benchmarks.metrics.ranking`): graded gains when the data grades relevance (`Gold.relevance`, e.g.
iKAT NIST judgments), else binary (`Gold.relevant_history_ids`: iKAT provenance, LoCoMo evidence).

Query modes (`memory.base.memory_query`): `raw` (the utterance as the user typed it), `resolved`
(the manual rewrite, iKAT; cases without one fall back to the raw text and are counted),
`context` (the raw utterance with the conversation so far, as the episode graph passes it; each
previous turn carries the system's response when the data has it — TREC iKAT gives participants
the canonical responses of earlier turns — and the backend's config says what it uses).

With no case carrying gold relevant history nothing is measured: every metric is None (null in
JSON) and `not_measured` says why — never a mean of 0.0 over zero cases.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from atelier.benchmarks.case import Case, CaseView, Gold, HistoryEvent
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.metrics.ranking import as_run, evaluate_runs
from atelier.memory.base import QUERY_MODES, MemoryBackend, QueryMode, memory_query
from atelier.memory.contract import checked_context, held_to_contract
from atelier.memory.persona_first import latest_persona

CUTOFFS = (3, 10)


def gold_qrels(gold: Gold) -> dict[str, int]:
    """Graded judgments when the data has them, else every relevant id with grade 1."""
    if gold.relevance:
        return dict(gold.relevance)
    return {event_id: 1 for event_id in gold.relevant_history_ids}


def has_gold(case: Case) -> bool:
    """Whether the case has a positively judged history event (only those are scored)."""
    return any(grade > 0 for grade in gold_qrels(case.gold).values())


def user_histories(views: Sequence[CaseView]) -> dict[str, list[HistoryEvent]]:
    """Each user's history: the union of their cases' histories, first occurrence of each id, in order."""
    histories: dict[str, dict[str, HistoryEvent]] = {}
    for view in views:
        events = histories.setdefault(view.user_id, {})
        for event in view.history:
            events.setdefault(event.id, event)
    return {user: list(events.values()) for user, events in histories.items()}


class QueryResult(BaseModel):
    case_id: str
    ranking: list[str]
    relevant: list[str]
    ndcg_3: float
    ndcg_10: float
    p_3: float
    r_3: float
    rr: float
    latency_ms: float


NOT_MEASURED = "not measured: no case has gold relevant history"


class RetrievalEvaluation(BaseModel):
    """The means over judged cases; `n` counts them. With n == 0 every figure is None."""

    ndcg_3: float | None = Field(serialization_alias="nDCG@3")
    ndcg_10: float | None = Field(serialization_alias="nDCG@10")
    p_3: float | None = Field(serialization_alias="P@3")
    r_3: float | None = Field(serialization_alias="R@3")
    mrr: float | None = Field(serialization_alias="MRR")
    n: int
    not_measured: str | None = Field(default=None, description="Why nothing was measured (n == 0); None otherwise.")
    skipped_without_gold: int = Field(description="Cases with no positively judged history event (not scored).")
    resolved_missing: int = Field(default=0, description="`resolved` mode: cases without a rewrite (raw text used).")
    users: int
    history_events: int
    ingest_seconds: float
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    per_query: list[QueryResult] = Field(default_factory=list, exclude=True)

    def summary(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


async def evaluate_retrieval(
    backend: MemoryBackend,
    cases: Sequence[Case],
    query_mode: QueryMode = "raw",
    budget: int | None = None,
    concurrency: int = 1,
) -> RetrievalEvaluation:
    """Ingest each user once, recall every case with gold relevant history, score the rankings."""
    if query_mode not in QUERY_MODES:
        raise ValueError(f"query mode {query_mode!r}; valid: {', '.join(QUERY_MODES)}")
    views = [case.view() for case in cases]
    histories = user_histories(views)
    started = time.perf_counter()
    for user_id, events in histories.items():
        await backend.ingest(user_id, events)
    ingest_seconds = time.perf_counter() - started

    known = {user_id: {e.id for e in events} for user_id, events in histories.items()}
    judged = [(case, view) for case, view in zip(cases, views) if has_gold(case)]
    gate = asyncio.Semaphore(concurrency)

    async def recall(case: Case, view: CaseView) -> tuple[list[str], float]:
        query = memory_query(view, query_mode)
        async with gate:
            start = time.perf_counter()
            context = checked_context(await backend.context(view.user_id, query, budget), backend.name)
            elapsed = (time.perf_counter() - start) * 1000
        try:  # a run's own check: a ranking over budget, or naming another user's events, is not scored
            held_to_contract(
                context,
                user_id=view.user_id,
                budget=backend.budget(budget),
                known=known[view.user_id],
                persona=latest_persona(view.history),
            )
        except ContractBroken as exc:
            raise ContractBroken(exc.clause, f"case {case.id}: {exc.detail}", "recall") from None
        return context.event_ids, elapsed

    recalled = await asyncio.gather(*(recall(case, view) for case, view in judged))
    qrels = {case.id: gold_qrels(case.gold) for case, _ in judged}
    runs = {case.id: (as_run(ranking), qrels[case.id]) for (case, _), (ranking, _) in zip(judged, recalled)}
    scored = evaluate_runs(runs, CUTOFFS) if runs else {}  # trec_eval scores every query in one call
    results = [
        QueryResult(
            case_id=case.id,
            ranking=ranking,
            relevant=sorted(i for i, g in qrels[case.id].items() if g > 0),
            ndcg_3=scored[case.id].ndcg[3],
            ndcg_10=scored[case.id].ndcg[10],
            p_3=scored[case.id].precision[3],
            r_3=scored[case.id].recall[3],
            rr=scored[case.id].reciprocal_rank,
            latency_ms=latency_ms,
        )
        for (case, _), (ranking, latency_ms) in zip(judged, recalled)
    ]

    def mean(field: str) -> float | None:
        return math.fsum(getattr(r, field) for r in results) / len(results) if results else None

    latencies = [r.latency_ms for r in results]
    return RetrievalEvaluation(
        ndcg_3=mean("ndcg_3"),
        ndcg_10=mean("ndcg_10"),
        p_3=mean("p_3"),
        r_3=mean("r_3"),
        mrr=mean("rr"),
        n=len(results),
        not_measured=None if results else NOT_MEASURED,
        skipped_without_gold=len(cases) - len(judged),
        resolved_missing=sum(1 for _, view in judged if view.query.resolved is None) if query_mode == "resolved" else 0,
        users=len(histories),
        history_events=sum(len(events) for events in histories.values()),
        ingest_seconds=ingest_seconds,
        latency_ms_p50=_percentile(latencies, 50),
        latency_ms_p95=_percentile(latencies, 95),
        per_query=list(results),
    )
