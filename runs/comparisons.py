"""Paired comparisons against a baseline, with a correction for multiple comparisons.

Each comparison pairs the two sides' scores on the cases both were scored on (`paired_test`: mean
difference with a bootstrap CI, permutation and Wilcoxon p-values). A table of comparisons tests
many hypotheses at once, so its permutation p-values are adjusted together with
Benjamini-Hochberg (`scipy.stats.false_discovery_control`, which controls the false discovery
rate); `significant` reads the adjusted value at ALPHA.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from benchmarks.metrics.statistics import paired_test
from runs.results import ResultRecord

ALPHA = 0.05
CORRECTION = "Benjamini-Hochberg"


def scores_by_case(records: Iterable[ResultRecord], system: str, judge: str) -> dict[str, float]:
    return {r.case_id: r.scores[judge] for r in records
            if r.system == system and r.ok and r.scores.get(judge) is not None}


def paired_row(a: Mapping[str, float], b: Mapping[str, float], *, seed: int = 0) -> dict[str, Any] | None:
    """`a` against `b` on their shared cases (differences are a - b); None under two shared cases."""
    shared = sorted(a.keys() & b.keys())
    if len(shared) < 2:
        return None
    return paired_test([a[c] for c in shared], [b[c] for c in shared], seed=seed).model_dump()


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
    records: list[ResultRecord], systems: list[str], judges: list[str], baseline: str | None, *, seed: int = 0
) -> dict[str, Any]:
    """Every other system against `baseline` (default: the first system), per judge, adjusted as one family."""
    baseline = baseline if baseline in systems else (systems[0] if systems else None)
    rows: list[dict[str, Any]] = []
    for judge in judges:
        base = scores_by_case(records, baseline, judge) if baseline else {}
        for system in systems:
            if system == baseline:
                continue
            row = paired_row(scores_by_case(records, system, judge), base, seed=seed)
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


def versus_paper(records: list[ResultRecord], paper_rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For each number a paper reports (`[[report.paper]]`), ours: the mean over our scored cases of
    the same metric of the same judge, on the system that stands for the paper's row."""
    out = []
    for row in paper_rows:
        for metric, paper_value in row["values"].items():
            ours = []
            for record in records:
                if record.system != row["system"] or not record.ok:
                    continue
                for judgment in record.judgments:
                    if judgment.judge != row["judge"] or judgment.error:
                        continue
                    value = judgment.score if metric == "score" else detail_value(judgment.details, metric)
                    if value is not None:
                        ours.append(value)
            out.append({"row": row["row"], "system": row["system"], "judge": row["judge"], "metric": metric,
                        "paper": paper_value, "ours": sum(ours) / len(ours) if ours else None, "n": len(ours)})
    return out
