"""The personalization effect: how much of a system's score comes from its user's own context.

A run with counterfactual controls (`[run] controls`; benchmarks/controls.py) answers each case
again with another user's context (`swapped`), none (`no_context`) or the user's events holding
other users' texts (`shuffled_history`), judged against the case's own user and gold. Per system,
judge and control — and per criterion of judges that report criteria — the effect is

    own - control

paired by case (each case's mean over its epochs), with the run's intervals and tests
(`runs.reading.comparisons.paired_row`: the clustered ones when cases carry clusters — PDR's
persona x task), their p-values adjusted together as one family (Benjamini-Hochberg, `adjust`).
A criterion *responds to the user* when some control's effect on it has a 95% interval that
excludes 0; one whose intervals all cover 0 shows no response this run could detect (which is no
proof of none: each row's `mde` says what it could have detected).

Control episodes never enter the systems' own means. summary.json's `personalization` holds the
effects, each control's episodes (answered, failed, degraded: `context_leak` counts answers that
knew the own user's facts without being given them) and their cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from atelier.agents.models.ledger import LedgerEntry, ledger_totals
from atelier.benchmarks.common.degradation import counts_by_kind
from atelier.benchmarks.controls import CONTROL_KINDS
from atelier.runs.folder.results import ResultRecord
from atelier.runs.reading.comparisons import ALPHA, CORRECTION, CaseClusters, adjust, judgment_value, paired_row

HEADLINE = None  # the criterion of a judge's headline score


def case_values(
    records: Iterable[ResultRecord], system: str, control: str | None, judge: str, criterion: str | None = HEADLINE
) -> dict[str, float]:
    """Case id -> the judge's score (or one criterion's) of `system`'s episodes of `control` (None: its
    own), each case's mean over its scored epochs; in case-id order."""
    by_case: dict[str, list[float]] = {}
    for r in records:
        if r.system != system or r.control != control or not r.ok:
            continue
        for j in r.judgments:
            if j.judge != judge or j.failed:
                continue
            value = j.score if criterion is None else judgment_value(j, criterion)
            if value is not None:
                by_case.setdefault(r.case_id, []).append(value)
    return {case: math.fsum(v) / len(v) for case, v in sorted(by_case.items())}


def _criteria(records: Iterable[ResultRecord], system: str, judge: str) -> list[str]:
    """The criteria `judge` reported on `system`'s own episodes, in first-seen order."""
    seen: dict[str, None] = {}
    for r in records:
        if r.system == system and r.control is None and r.ok:
            for j in r.judgments:
                if j.judge == judge:
                    seen.update(dict.fromkeys(j.criteria))
    return list(seen)


def effects(
    records: list[ResultRecord],
    controls: dict[str, list[str]],
    judges: list[str],
    *,
    seed: int = 0,
    clusters: CaseClusters | None = None,
    headline_only: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Every (system, judge, criterion, control) effect own - control on their shared scored cases,
    adjusted together (rows with under two shared cases are left out). `headline_only`: judges whose
    criteria mean something else in each case (`Judge.case_specific_criteria`)."""
    rows: list[dict[str, Any]] = []
    plain = set(headline_only)
    for system, kinds in controls.items():
        for judge in judges:
            criteria = [] if judge in plain else _criteria(records, system, judge)
            for criterion in [HEADLINE, *criteria]:
                own = case_values(records, system, None, judge, criterion)
                for kind in kinds:
                    row = paired_row(
                        own, case_values(records, system, kind, judge, criterion), seed=seed, clusters=clusters
                    )
                    if row is not None:
                        rows.append({"system": system, "judge": judge, "criterion": criterion, "control": kind, **row})
    return adjust(rows)


def excludes_zero(row: dict[str, Any]) -> bool:
    """Whether an effect's 95% interval lies wholly above or below 0."""
    low, high = row.get("ci_low"), row.get("ci_high")
    return low is not None and high is not None and (low > 0 or high < 0)


def responding(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (system, judge, criterion): whether it responds to the user — some control's effect has a
    95% interval that excludes 0 — and the controls it responds to."""
    out: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for row in rows:
        key = (row["system"], row["judge"], row["criterion"])
        entry = out.setdefault(
            key, {"system": key[0], "judge": key[1], "criterion": key[2], "responds": False, "to": []}
        )
        if excludes_zero(row):
            entry["responds"] = True
            entry["to"].append(row["control"])
    return list(out.values())


def control_episodes(
    records: list[ResultRecord], controls: dict[str, list[str]], ledger: Iterable[LedgerEntry] = ()
) -> dict[str, dict[str, Any]]:
    """Per system and control: its episodes (answered, failed), what degraded in them (by kind;
    `context_leak` among them), how many leaked, and what their model calls cost."""
    calls: dict[tuple[str, str], list[LedgerEntry]] = {}
    for entry in ledger:
        if entry.control is not None and entry.system is not None:
            calls.setdefault((entry.system, entry.control), []).append(entry)
    out: dict[str, dict[str, Any]] = {}
    for system, kinds in controls.items():
        out[system] = {}
        for kind in kinds:
            mine = [r for r in records if r.system == system and r.control == kind]
            answered = [r for r in mine if r.ok]
            out[system][kind] = {
                "n": len(answered),
                "errors": len(mine) - len(answered),
                "degraded": counts_by_kind(d for r in answered for d in r.degraded),
                "leaked_episodes": sum(1 for r in answered if any(d.kind == "context_leak" for d in r.degraded)),
                "calls": ledger_totals(calls.get((system, kind), [])),
            }
    return out


def personalization(
    records: list[ResultRecord],
    controls: dict[str, list[str]],
    judges: list[str],
    *,
    seed: int = 0,
    clusters: CaseClusters | None = None,
    ledger: Iterable[LedgerEntry] = (),
    donors: dict[str, str] | None = None,
    headline_only: Iterable[str] = (),
) -> dict[str, Any] | None:
    """summary.json's `personalization` (None when the run has no controls). `records`: the run's own
    episodes and its control episodes; `donors`: the swapped control's user -> donor (config.json)."""
    controls = {system: kinds for system, kinds in controls.items() if kinds}
    if not controls:
        return None
    rows = effects(records, controls, judges, seed=seed, clusters=clusters, headline_only=headline_only)
    return {
        "controls": controls,
        "kinds": {kind: CONTROL_KINDS[kind] for kind in sorted({k for kinds in controls.values() for k in kinds})},
        "swapped_donors": donors or {},
        "correction": CORRECTION,
        "alpha": ALPHA,
        "effects": rows,
        "responding": responding(rows),
        "episodes": control_episodes(records, controls, ledger),
        "note": "effect = own - control, paired by case; a control answers with another context (or none) and is "
        "judged against the case's own user and gold. An interval above 0: the score rests on the user's own "
        "context; covering 0: no effect this run could detect (see mde).",
    }


def case_effects(records: list[ResultRecord], system: str, control: str, judge: str) -> dict[tuple[str, str], float]:
    """(benchmark, case id) -> own - control of the judge's headline score, on the cases both have."""
    benchmark = {r.case_id: r.benchmark for r in records}
    own = case_values(records, system, None, judge)
    other = case_values(records, system, control, judge)
    return {(benchmark[c], c): own[c] - other[c] for c in sorted(own.keys() & other.keys())}


def across_runs(
    runs: list[tuple[str, dict[str, Any], list[ResultRecord]]],
    baseline: str,
    *,
    seed: int = 0,
    clusters: CaseClusters | None = None,
) -> dict[str, Any]:
    """`atelier compare`'s personalization: each run's headline effects as its summary.json gives them
    (`runs`: label, summary, every record with the controls), and each entry's effect against the
    baseline entry's (`run:system`) under the same judge and control, paired on the cases both have
    (a difference of effects: does one system personalize more than another), adjusted together."""
    rows = []
    per_case: dict[tuple[str, str, str], dict[tuple[str, str], float]] = {}
    for label, summary, records in runs:
        found = summary.get("personalization") or {}
        for row in found.get("effects") or []:
            if row["criterion"] is not None:
                continue
            entry = f"{label}:{row['system']}"
            rows.append({"entry": entry, **{k: row[k] for k in ("judge", "control", "n", "mean_difference")}})
            rows[-1].update({k: row.get(k) for k in ("ci_low", "ci_high", "p_adjusted", "significant")})
            per_case[(entry, row["judge"], row["control"])] = case_effects(
                records, row["system"], row["control"], row["judge"]
            )
    versus = []
    for (entry, judge, control), effect in per_case.items():
        base = per_case.get((baseline, judge, control))
        if entry == baseline or base is None:
            continue
        paired = paired_row(effect, base, seed=seed, clusters=clusters)
        if paired is not None:
            versus.append({"entry": entry, "judge": judge, "control": control, **paired})
    return {"effects": rows, "baseline": baseline, "versus_baseline": adjust(versus), "correction": CORRECTION}
