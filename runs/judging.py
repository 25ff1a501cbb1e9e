"""Judging a stored response again, without running its system again.

A resumed run uses it for judgments that failed (429s after every retry, a judge model that was
down) or that a changed judge configuration made stale; `atelier rescore` re-judges a whole run
with it. The judges run through the judge graph, so each call is tagged with its graph node in
the ledger like any other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache

from agents.ledger import call_tags
from benchmarks.case import Case
from graphs.context import EpisodeContext
from graphs.judge import build_judge_graph
from runs.results import ResultRecord


def judgments_to_redo(record: ResultRecord, judges: Sequence[str]) -> list[str]:
    """The judges (by name) whose judgment of this record is missing or failed."""
    scored = {j.judge for j in record.judgments if j.error is None}
    return [name for name in judges if name not in scored]


@lru_cache(maxsize=1)
def _judge_graph():
    return build_judge_graph()


async def judge_again(
    record: ResultRecord, case: Case, context: EpisodeContext, judges: Sequence[str] | None = None
) -> ResultRecord:
    """`record` with the named judges' judgments made anew from its stored response (default: the
    judges of `context` whose judgment is missing or failed). Other judgments are kept."""
    if not record.ok or record.response is None:
        raise ValueError(f"{record.key} has no response to judge (status {record.status})")
    configured = [j["name"] for j in context.judges]
    names = list(judges) if judges is not None else judgments_to_redo(record, configured)
    if not names:
        return record
    with call_tags(case=record.case_id, system=record.system):
        out = await _judge_graph().ainvoke(
            {"case": case, "response": record.response, "judge_names": names}, context=context
        )
    fresh = {j.judge: j for j in out["judgments"]}
    kept = {j.judge: j for j in record.judgments if j.judge not in fresh and j.judge in configured}
    judgments = [fresh.get(name) or kept[name] for name in configured if name in fresh or name in kept]
    return record.model_copy(update={
        "judgments": judgments,
        "scores": {j.judge: j.score for j in judgments},
        "finished_at": time.time(),
    })
