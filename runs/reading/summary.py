"""summary.json: per system and judge, n / mean / 95% CI; paired tests between systems.

With epochs (`[run] epochs = k`: each (case, system) run k times) every figure rests on each case's
mean over its scored epochs: the mean is the mean of the per-case means, the CI over cases with all
their epochs (each case weighing the same), and the paired tests pair
per-case means. Each judge's entry then also gives the case means (`case_means`) and the spread
between epochs (`epoch_spread`: `benchmarks.metrics.statistics.epoch_spread`).

Cases that share a cluster (a persona, a task, a conversation: `Case.clusters`, given as `clusters`,
case id -> dimension -> label) are not independent: every CI and paired test then takes clusters as
the unit (`benchmarks.metrics.statistics`), and each says how (`ci_method`, `n_clusters`,
`design_effect`, `mde`, `cluster_notes`); the summary's `clusters` names the design.

Each cell (system x judge) also splits its score variance into between-case, between-epoch and
between-judge-repeat parts (`variance`: `benchmarks.metrics.variance.variance_components`): the
epoch part needs `[run] epochs` > 1, the repeat part `[[judges]] repeats` > 1; a part not measured
is null. Each epoch's judgment is an independent sample (`runs.folder.epochs.judge_context`);
with `[run] reuse_judgments` a response repeated in a later epoch got the earlier judgment back,
and is counted once.

Scores are put in case-id order before anything is computed from them, so the same results give
the same summary byte for byte, whatever the order of the lines in results.jsonl (a resumed run
appends in the order episodes finish).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import combinations
from typing import Any

from atelier.agents.judges.base import JudgeResult
from atelier.benchmarks.common.degradation import counts_by_kind
from atelier.benchmarks.metrics.statistics import epoch_spread, mean_interval, paired_test
from atelier.benchmarks.metrics.variance import variance_components
from atelier.runs.folder.results import ResultRecord
from atelier.runs.reading.comparisons import CaseClusters, cluster_labels, cluster_summary, scores_by_case


def _epoch_scores(records: Iterable[ResultRecord], system: str, judge: str) -> dict[str, dict[int, float]]:
    """Case id -> epoch -> score, cases and epochs in order."""
    scores: dict[str, dict[int, float]] = {}
    for r in records:
        score = r.scores.get(judge)
        if r.system == system and r.ok and score is not None:
            scores.setdefault(r.case_id, {})[r.epoch] = score
    return {case: dict(sorted(by_epoch.items())) for case, by_epoch in sorted(scores.items())}


def repeat_scores(
    records: Iterable[ResultRecord], system: str, judge: str, *, reused: bool = False
) -> dict[str, dict[int, list[float]]]:
    """Case id -> epoch -> the judge's score in each of its repeats (one score when it judged once).
    `reused` (`[run] reuse_judgments`): an epoch whose response is the same as an earlier epoch's of
    the case got that epoch's judgment back, not a new sample of it, so it is left out (counted once)."""
    scores: dict[str, dict[int, list[float]]] = {}
    seen: set[tuple[str, str]] = set()
    for r in sorted(records, key=lambda r: (r.case_id, r.epoch)):
        if r.system != system or not r.ok:
            continue
        if reused and r.response is not None:
            if (r.case_id, r.response.text) in seen:
                continue
            seen.add((r.case_id, r.response.text))
        for j in r.judgments:
            if j.judge != judge or j.failed:
                continue
            repeats = j.details.get("repeat_scores") if j.repeats > 1 else None
            values = [float(v) for v in repeats if v is not None] if repeats else []
            if not values and j.score is not None:
                values = [j.score]
            if values:
                scores.setdefault(r.case_id, {})[r.epoch] = values
    return {case: dict(sorted(by_epoch.items())) for case, by_epoch in sorted(scores.items())}


def epoch_means(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """One record per (case, system): its first epoch's, with each judge's score the mean over the
    epochs that judge scored (for what pairs systems case by case)."""
    records = sorted(records, key=lambda r: (r.case_id, r.system, r.epoch))
    firsts: dict[tuple[str, str], ResultRecord] = {}
    scores: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in records:
        pair = (r.case_id, r.system)
        if r.ok and pair in firsts and not firsts[pair].ok:
            del firsts[pair]
        firsts.setdefault(pair, r)
        if r.ok:
            for judge, score in r.scores.items():
                if score is not None:
                    scores.setdefault(pair, {}).setdefault(judge, []).append(score)
    return [
        first.model_copy(update={"scores": {judge: math.fsum(v) / len(v) for judge, v in scores.get(pair, {}).items()}})
        for pair, first in firsts.items()
    ]


def summarize(
    records: list[ResultRecord],
    systems: list[str],
    judges: list[str],
    *,
    seed: int = 0,
    aggregates: dict[str, Callable[[list[JudgeResult]], dict[str, Any]]] | None = None,
    epochs: int = 1,
    clusters: CaseClusters | None = None,
    reuse_judgments: bool = False,
) -> dict[str, Any]:
    """`aggregates`: per judge key, the judge's own system-level figures (criterion means, PQR's pooled
    FA and CC, ...) from its judgments. `epochs`: the runs of each (case, system) the recipe asked for.
    `clusters`: case id -> dimension -> cluster label (None or empty: independent cases).
    `reuse_judgments`: the recipe's `[run] reuse_judgments` (see `repeat_scores`)."""
    per_system: dict[str, Any] = {}
    for system in systems:
        # in one fixed order, so every figure (a judge's own aggregates too) is the same whatever the
        # order of the result lines: float sums differ in their last bits from one order to another
        mine = sorted((r for r in records if r.system == system), key=lambda r: (r.case_id, r.epoch, r.key))
        answered = [r for r in mine if r.ok]
        entry: dict[str, Any] = {
            "n": len(answered),
            "errors": sum(not r.ok for r in mine),
            # what degraded in memory and in the system's own steps, by kind; and in how many episodes
            "degraded": counts_by_kind(d for r in answered for d in r.system_degraded),
            "degraded_episodes": sum(1 for r in answered if r.system_degraded),
            "judges": {},
        }
        ends = Counter(
            r.response.meta["conversation"]["ended"]
            for r in answered
            if r.response and "ended" in r.response.meta.get("conversation", {})
        )
        if ends:  # how its conversations with the simulated user ended (satisfied, gave_up, turn_budget, ...)
            entry["conversations"] = dict(sorted(ends.items()))
        for judge in judges:
            by_case = scores_by_case(mine, system, judge)
            values = list(by_case.values())
            interval = mean_interval(values, seed=seed, clusters=cluster_labels(list(by_case), clusters))
            pairs = [(r, j) for r in answered for j in r.judgments if j.judge == judge]
            judged = [j for _, j in pairs]
            spreads = [j.std for j in judged if j.std is not None]
            entry["judges"][judge] = {
                "n": len(values),  # 0: not measured, and mean and CI are null
                "mean": math.fsum(values) / len(values) if values else None,
                "ci95": [interval.low, interval.high],
                "ci_method": interval.ci_method,
                "n_clusters": interval.n_clusters,
                "design_effect": interval.design_effect,
                "mde": interval.mde,
                "cluster_notes": interval.cluster_notes,
                # no score: the judgment failed, or its protocol leaves the score undefined (PQR excluding
                # a report with no cited claim); a response the judge does not apply to (a pairwise judge's
                # baseline) has no judgment and is not counted
                "failed": sum(1 for j in judged if j.failed),
                "undefined": sum(1 for j in judged if not j.failed and j.score is None),
                # scores that rest on degraded input (the system's or the judgment's own): shown, and marked
                "n_degraded": sum(1 for r, j in pairs if j.score is not None and (r.system_degraded or j.degraded)),
                "degraded": counts_by_kind(d for j in judged for d in j.degraded),
                # conditions judges report (no_cited_claims, order_flip, empty_gold, ...): how many responses
                "flags": dict(sorted(Counter(flag for j in judged for flag in j.flags).items())),
                "mean_repeat_std": math.fsum(spreads) / len(spreads) if spreads else None,
                "variance": variance_components(
                    repeat_scores(mine, system, judge, reused=reuse_judgments)
                ).model_dump(),
            }
            if epochs > 1:  # n, mean and CI above are over cases, each case's score its mean over epochs
                by_epoch = _epoch_scores(mine, system, judge)
                entry["judges"][judge]["case_means"] = scores_by_case(mine, system, judge)
                entry["judges"][judge]["epoch_spread"] = epoch_spread(by_epoch, epochs).model_dump()
            if aggregates and judge in aggregates:
                entry["judges"][judge].update(aggregates[judge]([j for j in judged if not j.failed]))
        per_system[system] = entry

    comparisons = []
    for judge in judges:
        for a, b in combinations(systems, 2):
            scores_a, scores_b = scores_by_case(records, a, judge), scores_by_case(records, b, judge)
            shared = sorted(scores_a.keys() & scores_b.keys())
            if len(shared) < 2:
                continue
            test = paired_test(
                [scores_a[c] for c in shared],
                [scores_b[c] for c in shared],
                seed=seed,
                clusters=cluster_labels(shared, clusters),
            )
            comparisons.append({"judge": judge, "a": a, "b": b, **test.model_dump()})
    return {
        "epochs": epochs,
        "clusters": cluster_summary(records, clusters),
        "systems": per_system,
        "comparisons": comparisons,
    }
