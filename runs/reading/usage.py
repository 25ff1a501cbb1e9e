"""What each system of a run cost: model calls, tokens and dollars (from the ledger, split by the
kind of role that made them) and episode latency (from the results)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from atelier.agents.models.ledger import LedgerEntry, ledger_totals
from atelier.agents.models.settings import ROLE_FALLBACK
from atelier.runs.folder.results import ResultRecord


def role_kind(role: str) -> str:
    """`system`, `judge` or `user_sim`: the base role a finer one (researcher, writer...) falls back to."""
    seen = set()
    while role in ROLE_FALLBACK and role not in seen:
        seen.add(role)
        role = ROLE_FALLBACK[role]
    return role


def _latency(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None}
    array = np.asarray(values, dtype=float)
    # fsum: exact, so the mean does not depend on the order of the result lines (numpy's summation
    # does, in its last bits, which rounding can turn into a different fourth decimal)
    return {
        "mean": round(math.fsum(values) / len(values), 4),
        "p50": round(float(np.percentile(array, 50)), 4),
        "p95": round(float(np.percentile(array, 95)), 4),
    }


def system_usage(
    records: Iterable[ResultRecord],
    ledger: Iterable[LedgerEntry],
    systems: list[str],
    case_ids: Iterable[str],
) -> dict[str, dict[str, Any]]:
    """Per system: ledger totals per role kind (`system`, `judge`, `user_sim`...) for the calls made
    on the run's cases, and the latency of its episodes in seconds."""
    cases = set(case_ids)
    calls: dict[str, dict[str, list[LedgerEntry]]] = defaultdict(lambda: defaultdict(list))
    for entry in ledger:
        if entry.system in systems and entry.case_id in cases and entry.control is None:  # controls: their own line
            calls[entry.system][role_kind(entry.role)].append(entry)
    latencies: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.ok:
            latencies[record.system].append(record.latency_s)
    return {
        system: {
            "calls": {kind: ledger_totals(entries) for kind, entries in sorted(calls[system].items())},
            "latency_s": _latency(latencies[system]),
        }
        for system in systems
    }


def format_cost(totals: dict[str, Any]) -> str:
    """`$0.0123`, `unknown` (no call priced) or `$0.0123 + 4 unpriced calls`."""
    cost, unpriced = totals.get("cost_usd"), totals.get("unpriced_calls", 0)
    if cost is None:
        return "unknown"
    text = f"${cost:.4g}" if cost else "$0"
    return f"{text} + {unpriced} unpriced call{'s' * (unpriced != 1)}" if unpriced else text
