"""Paired comparisons against a baseline, with a correction for multiple comparisons.

Each comparison pairs the two sides' scores on the cases both were scored on (`paired_test`: mean
difference, the sign-flip test over cases or clusters and the interval that inverts it, a Wilcoxon
p-value), taking the cases' clusters as the unit when they have them (`cluster_labels`). A table of comparisons tests
many hypotheses at once, so its permutation p-values are adjusted together with
Benjamini-Hochberg (`scipy.stats.false_discovery_control`, which controls the false discovery
rate); `significant` reads the adjusted value at ALPHA.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from atelier.benchmarks.metrics.statistics import bootstrap_ci, paired_test
from atelier.runs.folder.results import ResultRecord

ALPHA = 0.05
CORRECTION = "Benjamini-Hochberg"


# case id (compare: (benchmark, case id)) -> dimension (persona, task, conversation, ...) -> the
# case's cluster on it (`Case.clusters`)
CaseClusters = Mapping[Any, Mapping[str, str]]


def cluster_labels(case_ids: Iterable[Hashable], clusters: CaseClusters | None) -> dict[str, list[str]] | None:
    """The `clusters` argument of the statistics for these cases, in their order: per dimension any
    of them has, one label each (a case without that dimension is a cluster of its own). None: no
    case has clusters."""
    ids = list(case_ids)
    if not clusters:
        return None
    dimensions = list(dict.fromkeys(d for c in ids for d in clusters.get(c, {})))
    if not dimensions:
        return None
    return {d: [clusters.get(c, {}).get(d) or f"case:{c}" for c in ids] for d in dimensions}


def cluster_summary(records: Iterable[ResultRecord], clusters: CaseClusters | None) -> dict[str, Any]:
    """The run's cluster design: each dimension with how many clusters its scored cases fall in."""
    from atelier.benchmarks.metrics.clusters import MIN_CLUSTERS

    ids = sorted({r.case_id for r in records if r.ok})
    labels = cluster_labels(ids, clusters) or {}
    dimensions = {d: len(set(values)) for d, values in labels.items()}
    if not dimensions:
        note = (
            "the cases carry no cluster keys: every interval and test takes cases as independent"
            if clusters is not None
            else "the run's cases could not be loaded, so their clusters are unknown: cases taken as independent"
        )
        return {"dimensions": {}, "note": note}
    few = [d for d, g in dimensions.items() if g < MIN_CLUSTERS]
    out: dict[str, Any] = {
        "dimensions": dimensions,
        "note": f"intervals and tests take {' x '.join(dimensions)} clusters as the unit (each cell's ci_method says how)",
    }
    if few:
        out["warning"] = f"few clusters ({', '.join(f'{d}: {dimensions[d]}' for d in few)}; under {MIN_CLUSTERS})"
    return out


def scores_by_case(records: Iterable[ResultRecord], system: str, judge: str) -> dict[str, float]:
    """Case id -> score, in case-id order; with epochs, the case's mean over its scored epochs (paired
    tests and CIs take cases as the unit, each case once)."""
    by_case: dict[str, list[float]] = {}
    for r in records:
        score = r.scores.get(judge)
        if r.system == system and r.ok and score is not None:
            by_case.setdefault(r.case_id, []).append(score)
    return {case: math.fsum(values) / len(values) for case, values in sorted(by_case.items())}


def paired_row(
    a: Mapping[Any, float], b: Mapping[Any, float], *, seed: int = 0, clusters: CaseClusters | None = None
) -> dict[str, Any] | None:
    """`a` against `b` on their shared cases (differences are a - b); None under two shared cases."""
    shared = sorted(a.keys() & b.keys())
    if len(shared) < 2:
        return None
    return paired_test(
        [a[c] for c in shared], [b[c] for c in shared], seed=seed, clusters=cluster_labels(shared, clusters)
    ).model_dump()


def adjust(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add `p_adjusted` and `significant` to rows holding a `permutation_p` (adjusted together)."""
    from scipy.stats import false_discovery_control

    tested = [row for row in rows if row.get("permutation_p") is not None]
    adjusted = false_discovery_control([row["permutation_p"] for row in tested]) if tested else []
    for row in rows:
        row["p_adjusted"], row["significant"] = None, False
    for row, p in zip(tested, adjusted):
        row["p_adjusted"] = float(p)
        row["significant"] = bool(p < ALPHA)
    return rows


def versus_baseline(
    records: list[ResultRecord],
    systems: list[str],
    judges: list[str],
    baseline: str | None,
    *,
    seed: int = 0,
    clusters: CaseClusters | None = None,
) -> dict[str, Any]:
    """Every other system against `baseline` (default: the first system), per judge, adjusted as one family."""
    baseline = baseline if baseline in systems else (systems[0] if systems else None)
    rows: list[dict[str, Any]] = []
    for judge in judges:
        base = scores_by_case(records, baseline, judge) if baseline else {}
        for system in systems:
            if system == baseline:
                continue
            row = paired_row(scores_by_case(records, system, judge), base, seed=seed, clusters=clusters)
            if row is not None:
                rows.append({"judge": judge, "system": system, **row})
    return {"baseline": baseline, "correction": CORRECTION, "alpha": ALPHA, "rows": adjust(rows)}


def detail_value(details: Mapping[str, Any], path: str) -> float | None:
    """The number at a dotted key path of a judgment's details (`P`, `dimensions.GOAL`), if any."""
    value: Any = details
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_HISTORY = re.compile(r"^history\.(ndcg|recall|precision)@(\d+)$")
_TRADE_OFF = re.compile(r"^(kendall_tau|n_both_positive)\((\w+),(\w+)\)$")


def judgment_value(judgment: Any, metric: str) -> float | None:
    """`score` (the headline), a per-criterion score the judge reports (`criteria`), or a key path
    into its details."""
    if metric == "score":
        return judgment.score
    if metric in judgment.criteria:
        return judgment.criteria[metric]
    return detail_value(judgment.details, metric)


def tool_recalls(record: ResultRecord) -> list[dict[str, Any]]:
    """The system's `recall_memory` calls (graphs/memory_tool.py), as its response's meta lists them:
    each `{"query", "event_ids", "text"}`, in the order made."""
    meta = record.response.meta if record.response is not None else {}
    recalls = meta.get("recalled_memory") or []
    return [r for r in recalls if isinstance(r, dict)]


def recalled_event_ids(record: ResultRecord) -> list[str]:
    """The history events the system received, in the order it received them: the upfront
    context's (most relevant first), then each tool recall's; each event once."""
    upfront = record.user_context.event_ids if record.user_context is not None else []
    recalled = [str(event) for recall in tool_recalls(record) for event in recall.get("event_ids") or []]
    return list(dict.fromkeys([*upfront, *recalled]))


def _history_values(records: list[ResultRecord], cases: Mapping[str, Any], kind: str, k: int) -> list[float]:
    return [value for _, value in _history_scores(records, cases, kind, k)]


def _history_scores(
    records: list[ResultRecord], cases: Mapping[str, Any], kind: str, k: int
) -> list[tuple[str, float]]:
    """Each scored episode's history retrieval against the case's gold relevant events, with its case
    id: the ranking is every event the system received, upfront and through `recall_memory`
    (`recalled_event_ids`)."""
    from atelier.benchmarks.metrics.ranking import query_ranking_scores

    values = []
    for record in records:
        case = cases.get(record.case_id)
        if case is None or (record.user_context is None and not tool_recalls(record)):
            continue
        qrels = dict(case.gold.relevance) or {event: 1 for event in case.gold.relevant_history_ids}
        if not any(grade > 0 for grade in qrels.values()):
            continue
        scores = query_ranking_scores(recalled_event_ids(record), qrels, [k])
        values.append((record.case_id, getattr(scores, kind)[k]))
    return values


def _trade_off(judgments: list[Any], kind: str, a: str, b: str) -> tuple[float | None, int]:
    """Kendall's tau between two criteria over the cases where both are positive (AEPD's pilot)."""
    from scipy.stats import kendalltau

    pairs = [(judgment_value(j, a), judgment_value(j, b)) for j in judgments]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None and x > 0 and y > 0]
    if kind == "n_both_positive":
        return float(len(pairs)), len(pairs)
    if len(pairs) < 3:
        return None, len(pairs)
    return float(kendalltau([x for x, _ in pairs], [y for _, y in pairs]).statistic), len(pairs)


def versus_paper(
    records: list[ResultRecord],
    paper_rows: list[Mapping[str, Any]],
    cases: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    clusters: CaseClusters | None = None,
) -> list[dict[str, Any]]:
    """For each number a paper reports (`[[report.paper]]`), ours on the system that stands for the
    paper's row: the mean over our scored cases of the judge's metric (`score`, a criterion, a details
    path); `history.ndcg@K` / `history.recall@K` / `history.precision@K`, the memory's ranking of the
    user's history against the gold relevant events; or `kendall_tau(a,b)` / `n_both_positive(a,b)`
    between two criteria over the cases where both are positive. `ci95`: the 95% CI of a mean over
    two or more cases (`statistics.mean_interval`: cluster-robust when the cases have `clusters`), else
    [None, None] (one case; a rank correlation)."""
    out = []
    for row in paper_rows:
        mine = [r for r in records if r.system == row["system"] and r.ok]
        judgments = [j for r in mine for j in r.judgments if j.judge == row.get("judge") and not j.error]
        for metric, paper_value in row["values"].items():
            history, trade_off = _HISTORY.match(metric), _TRADE_OFF.match(metric)
            ids: list[str] = []
            if history:
                scored = _history_scores(mine, cases or {}, history.group(1), int(history.group(2)))
                ids, values = [c for c, _ in scored], [v for _, v in scored]
                ours, n = (sum(values) / len(values) if values else None), len(values)
            elif trade_off:
                ours, n = _trade_off(judgments, *trade_off.groups())
            else:  # with epochs, each case's mean over its epochs: n counts cases, as summary.json's does
                by_case: dict[str, list[float]] = {}
                for r in mine:
                    for j in r.judgments:
                        if j.judge == row.get("judge") and not j.error and (v := judgment_value(j, metric)) is not None:
                            by_case.setdefault(r.case_id, []).append(v)
                ids = sorted(by_case)
                values = [math.fsum(by_case[c]) / len(by_case[c]) for c in ids]
                ours, n = (sum(values) / len(values) if values else None), len(values)
            # a CI for a mean over cases; a rank correlation or a count has none
            ci = (
                list(bootstrap_ci(values, seed=seed, clusters=cluster_labels(ids, clusters)))
                if not trade_off and n >= 2
                else [None, None]
            )
            out.append(
                {
                    "row": row["row"],
                    "system": row["system"],
                    "judge": row.get("judge"),
                    "metric": metric,
                    "paper": paper_value,
                    "ours": ours,
                    "ci95": ci,
                    "n": n,
                }
            )
    return out
