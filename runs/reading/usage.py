"""What each system of a run cost: model calls, tokens and dollars (from the ledger, split by the
kind of role that made them) and episode latency (from the results).

Two figures for every total, so a rerun compares to a first run:
- **as spent**: what the providers were asked for in this run (a call the shared response cache
  answered costs nothing and counts no tokens);
- **uncached**: what the same calls would have cost with no cache — every answered call's tokens,
  the cache's answers priced as their provider would have charged (the role's own price, else
  litellm's map; `unknown` when neither knows the model) — with the cache-hit share beside it.

A memory's ingest of a user's history (every call of the `ingest` step, and of a resumed run's
memory rebuild) is **memory cost**, counted per (system, user) under `memory`: it is paid once per
user, by whichever episode of the user came first, so charging it to that episode would make that
case look slow and dear and the others cheap. The time an episode spent in its ingest step
(`ResultRecord.ingest_s`: the ingest, or the wait for another episode's ingest of the same user) is
taken out of its latency, and a user's ingest time is the longest such step among its episodes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from atelier.agents.models.ledger import LedgerEntry, ledger_totals, model_calls
from atelier.agents.models.pricing import Price, price_of
from atelier.agents.models.settings import ROLE_FALLBACK, ModelSettings
from atelier.memory.journal import REBUILD_STEP
from atelier.runs.folder.results import ResultRecord

MEMORY = "memory"  # the usage kind of a memory's ingest calls
INGEST_NODES = frozenset({"ingest", REBUILD_STEP})


def role_kind(role: str) -> str:
    """`system`, `judge` or `user_sim`: the base role a finer one (researcher, writer...) falls back to."""
    seen = set()
    while role in ROLE_FALLBACK and role not in seen:
        seen.add(role)
        role = ROLE_FALLBACK[role]
    return role


def usage_kind(entry: LedgerEntry) -> str:
    """`memory` for a memory's ingest, else the role's kind (`system`, `judge`, `user_sim`)."""
    return MEMORY if entry.node in INGEST_NODES else role_kind(entry.role)


class Prices:
    """The price of a ledger entry's tokens, per (role, model) from a run's `[models]` (config.json)."""

    _PRICE_FIELDS = ("input_cost_per_token", "output_cost_per_token", "search_cost_per_call")

    def __init__(self, models: dict[str, Any] | None = None) -> None:
        self.models = models or {}
        self._known: dict[tuple[str, str], tuple[Price, float | None]] = {}

    def _settings(self, role: str, model: str) -> ModelSettings:
        seen: set[str] = set()
        while role not in seen:
            seen.add(role)
            given = self.models.get(role)
            if isinstance(given, dict) and given.get("model") == model:
                return ModelSettings(
                    model=model, **{k: given[k] for k in self._PRICE_FIELDS if given.get(k) is not None}
                )
            if role not in ROLE_FALLBACK:
                break
            role = ROLE_FALLBACK[role]
        return ModelSettings(model=model)

    def uncached_cost(self, entry: LedgerEntry) -> float | None:
        """What the call would have cost from its provider: a provider call's own cost, a cache
        hit's tokens (and searches) priced; 0 for a call that failed; None when unknown."""
        if entry.status != "ok":
            return 0.0
        if not entry.cache_hit:
            return entry.cost_usd
        key = (entry.role, entry.model)
        if key not in self._known:
            settings = self._settings(entry.role, entry.model)
            self._known[key] = (price_of(settings), settings.search_cost_per_call)
        price, per_search = self._known[key]
        cost = price.of(entry.prompt_tokens, entry.completion_tokens)
        if cost is not None and per_search and entry.search_calls:
            cost += per_search * entry.search_calls
        return cost


def uncached_totals(entries: Iterable[LedgerEntry], prices: Prices) -> dict[str, Any]:
    """Tokens and dollars of these calls as they would be with nothing answered from the cache, and
    the share the cache answered. `cost_usd` is None when no answered call has a known price (a
    partial sum, with `unpriced_calls`, when some do)."""
    answered = [e for e in model_calls(list(entries)) if e.status == "ok"]
    costs = [prices.uncached_cost(e) for e in answered]
    priced = [c for c in costs if c is not None]
    hits = sum(e.cache_hit for e in answered)
    return {
        "calls": len(answered),
        "cache_hits": hits,
        "cache_hit_share": round(hits / len(answered), 4) if answered else None,
        "prompt_tokens": sum(e.prompt_tokens for e in answered),
        "completion_tokens": sum(e.completion_tokens for e in answered),
        "cost_usd": round(math.fsum(priced), 6) if priced or not answered else None,
        "unpriced_calls": len(costs) - len(priced),
    }


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


def session_ingest_s(record: ResultRecord) -> float:
    """The seconds of the record's latency its ingest step took: none when the episode was resumed
    past that step (its latency is the resuming session's, the ingest ran in an earlier one)."""
    if record.ingest_s is None or (record.resumed_from and record.resumed_from not in ("prepare", "ingest")):
        return 0.0
    return record.ingest_s


def _memory_per_user(
    entries: list[LedgerEntry], records: list[ResultRecord], users: dict[str, str], prices: Prices
) -> dict[str, Any]:
    """A system's memory cost: per user, its ingest calls as spent and uncached, and its ingest time
    (the longest ingest step of its episodes); and the totals over users."""
    by_user: dict[str, list[LedgerEntry]] = defaultdict(list)
    for entry in entries:
        by_user[users.get(entry.case_id or "", "?")].append(entry)
    seconds: dict[str, float] = {}
    for record in records:
        if record.ingest_s is not None:
            seconds[record.user_id] = max(seconds.get(record.user_id, 0.0), record.ingest_s)
    per_user = {}
    for user in sorted(set(by_user) | set(seconds)):
        calls = by_user.get(user, [])
        per_user[user] = {
            "spent": ledger_totals(calls),
            "uncached": uncached_totals(calls, prices),
            "seconds": round(seconds[user], 4) if user in seconds else None,
        }
    return {
        "users": len(per_user),
        "spent": ledger_totals(entries),
        "uncached": uncached_totals(entries, prices),
        "seconds": round(math.fsum(seconds.values()), 4) if seconds else None,
        "per_user": per_user,
    }


def system_usage(
    records: Iterable[ResultRecord],
    ledger: Iterable[LedgerEntry],
    systems: list[str],
    case_ids: Iterable[str],
    models: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per system: ledger totals per usage kind (`system`, `judge`, `user_sim`, `memory`) for the
    calls made on the run's cases, as spent (`calls`) and uncached (`uncached`); the memory's ingest
    per user (`memory`); and the latency of its episodes in seconds, their ingest step left out.
    `models`: the run's `[models]` (config.json's `recipe.models`), to price the cache's answers."""
    cases = set(case_ids)
    records = list(records)
    prices = Prices(models)
    users = {r.case_id: r.user_id for r in records}
    calls: dict[str, dict[str, list[LedgerEntry]]] = defaultdict(lambda: defaultdict(list))
    for entry in ledger:
        if entry.system in systems and entry.case_id in cases and entry.control is None:  # controls: their own line
            calls[entry.system][usage_kind(entry)].append(entry)
    latencies: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.ok:
            latencies[record.system].append(record.latency_s - session_ingest_s(record))
    out = {}
    for system in systems:
        kinds = sorted(calls[system].items())
        mine = [r for r in records if r.system == system]
        out[system] = {
            "calls": {kind: ledger_totals(entries) for kind, entries in kinds},
            "uncached": {kind: uncached_totals(entries, prices) for kind, entries in kinds},
            "latency_s": _latency(latencies[system]),
        }
        if calls[system].get(MEMORY) or any(r.ingest_s for r in mine):
            out[system][MEMORY] = _memory_per_user(calls[system].get(MEMORY, []), mine, users, prices)
    return out


def format_cost(totals: dict[str, Any]) -> str:
    """`$0.0123`, `unknown` (no call priced) or `$0.0123 + 4 unpriced calls`."""
    cost, unpriced = totals.get("cost_usd"), totals.get("unpriced_calls", 0)
    if cost is None:
        return "unknown"
    text = f"${cost:.4g}" if cost else "$0"
    return f"{text} + {unpriced} unpriced call{'s' * (unpriced != 1)}" if unpriced else text


def format_tokens(totals: dict[str, Any]) -> str:
    """`12,345` tokens (prompt + completion)."""
    return f"{totals.get('prompt_tokens', 0) + totals.get('completion_tokens', 0):,}"
