"""Judging responses already produced: a stored response judged again (`atelier rescore`, and a
resumed run's failed judgments), and the judges that compare two systems' responses to the same
case, which a run applies once every episode has finished.

Nothing here runs a system: the only model calls are the judges' own roles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from atelier.agents.judges.base import ComparativeJudge, Judge, JudgeResult
from atelier.agents.judges.contract import held_to_contract
from atelier.agents.models.ledger import call_tags
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import DataError
from atelier.graphs.context import EpisodeContext
from atelier.graphs.judge import judge_env
from atelier.graphs.resources import resources_for
from atelier.runs.folder.results import ResultRecord


def stored_response(record: ResultRecord) -> SystemResponse:
    """The response `record` stores: every record judged again or compared is an ok one, which has it."""
    if record.response is None:
        raise DataError(f"result {record.key} stores no response to judge")
    return record.response


async def judge_again(
    case: Case, record: ResultRecord, context: EpisodeContext, judges: Iterable[Judge] | None = None
) -> list[JudgeResult]:
    """`context`'s judges (or `judges` among them) on `record`'s stored response; comparative judges excepted."""
    resources = resources_for(context)
    chosen = [j for j in (judges if judges is not None else resources.judges) if not j.comparative]
    env = judge_env(resources)
    with call_tags(
        case=case.id, system=record.system, epoch=str(record.epoch), control=record.control, node="judge_again"
    ):
        return list(
            await asyncio.gather(*(held_to_contract(j, j.judge(case, stored_response(record), env)) for j in chosen))
        )


def judgments_due(record: ResultRecord, judges: Iterable[Judge]) -> list[Judge]:
    """The judges whose judgment of `record` is missing or failed (comparative ones aside: see
    `comparisons_due`); a resumed run redoes them from the stored response."""
    done = {j.judge for j in record.judgments if not j.failed}
    return [judge for judge in judges if not judge.comparative and judge.key not in done]


def comparisons_due(
    records: dict[str, ResultRecord], judge: ComparativeJudge
) -> list[tuple[ResultRecord, ResultRecord]]:
    """(record, baseline record) pairs this judge has not yet judged successfully: a system's response
    to a case beside the baseline's to the same case in the same epoch (`[run] epochs`), so each
    epoch's comparison is a sample of its own."""
    # a control episode (`[run] controls`) is compared with the baseline's own response, never stands for it
    baseline = {
        (r.case_id, r.epoch): r for r in records.values() if r.system == judge.baseline and r.ok and r.control is None
    }
    due = []
    for record in records.values():
        pair = baseline.get((record.case_id, record.epoch))
        if not record.ok or record.system == judge.baseline or pair is None:
            continue
        done = next((j for j in record.judgments if j.judge == judge.key), None)
        if done is None or done.failed:
            due.append((record, pair))
    return due


async def judge_comparisons(
    records: dict[str, ResultRecord],
    cases: dict[str, Case],
    contexts: Mapping[tuple[str, int], EpisodeContext],
    concurrency: int = 4,
) -> list[ResultRecord]:
    """Every comparative judge on every (system, baseline) pair of responses to the same case, where it
    is not already done, each epoch judged in its own epoch's context (`contexts`: (system, epoch) ->
    the context whose judges judge it, `runs.folder.epochs.judge_context`). Returns the updated
    records (to append: the last line of a key wins)."""
    updated: dict[str, ResultRecord] = {}
    limit = asyncio.Semaphore(concurrency)

    async def one(judge: ComparativeJudge, record: ResultRecord, other: ResultRecord) -> tuple[str, JudgeResult]:
        resources = resources_for(contexts[(record.system, record.epoch)])
        async with limit:
            with call_tags(
                case=record.case_id,
                system=record.system,
                epoch=str(record.epoch),
                control=record.control,
                node="compare",
            ):
                result = await held_to_contract(
                    judge,
                    judge.judge_pair(
                        cases[record.case_id], stored_response(record), stored_response(other), judge_env(resources)
                    ),
                )
        return record.key, result

    tasks = []
    for (system, epoch), context in contexts.items():
        for judge in resources_for(context).judges:
            if isinstance(judge, ComparativeJudge):
                tasks += [
                    one(judge, r, other)
                    for r, other in comparisons_due(records, judge)
                    if (r.system, r.epoch) == (system, epoch)
                ]
    for key, result in await asyncio.gather(*tasks):
        updated[key] = (updated.get(key) or records[key]).with_judgments([result])
    return list(updated.values())
