"""A run's summary does not depend on the order of its result lines: episode latency, and what each
judge's own aggregate is given."""

from __future__ import annotations

import itertools
import random

from atelier.agents.judges.base import JudgeResult
from atelier.runs.folder.results import ResultRecord
from atelier.runs.reading.summary import summarize
from atelier.runs.reading.usage import system_usage


def _record(i: int, latency: float) -> ResultRecord:
    return ResultRecord(
        key=f"k{i}",
        run_id="r",
        case_id=f"c{i}",
        system="s",
        benchmark="sample",
        user_id="u",
        setting="context",
        status="ok",
        latency_s=latency,
    )


def test_the_mean_latency_is_the_same_in_any_order_of_the_results():
    # numpy's summation gives 0.0 or 0.3333 for these depending on their order; the exact mean is 1/3
    latencies = [1e16, 1.0, -1e16]
    seen = {
        system_usage([_record(i, x) for i, x in enumerate(order)], [], ["s"], [])["s"]["latency_s"]["mean"]
        for order in itertools.permutations(latencies)
    }
    assert seen == {0.3333}
    usage = system_usage([_record(i, x) for i, x in enumerate([0.2, 0.1, 0.4, 0.3])], [], ["s"], [])
    assert usage["s"]["latency_s"] == {"mean": 0.25, "p50": 0.25, "p95": 0.385}


def test_a_judges_aggregate_sees_the_judgments_in_one_order_whatever_the_results_order():
    """Judges' aggregates sum floats (BESPOKE's columns, LoCoMo's F1 per category), whose last bits
    depend on the order; the summary gives them the judgments in one fixed order."""
    records = [
        _record(i, 0.1).with_judgments([JudgeResult(judge="j", score=0.1 * (i + 1), std=0.01 * i)]) for i in range(9)
    ]
    seen = set()
    for seed in range(6):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        summary = summarize(
            shuffled, ["s"], ["j"], aggregates={"j": lambda judged: {"order": tuple(round(j.score, 2) for j in judged)}}
        )
        figures = summary["systems"]["s"]["judges"]["j"]
        seen.add((figures["order"], figures["mean_repeat_std"]))
    assert len(seen) == 1
