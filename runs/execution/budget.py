"""A run's budget (`[run] budget_usd`): what has been spent, what is reserved, whether it was reached."""

from __future__ import annotations

import math
from typing import Any


class Budget:
    """`[run] budget_usd`: no episode starts that could take spend past it.

    Before an episode starts it reserves its system's forecast high end (`per_episode_usd_high`);
    when it ends the reservation is released for what its calls actually cost (its ledger lines;
    the whole reservation when that is unknown). Spend before this session (earlier sessions of the
    run folder, the preflight's probes) counts from the ledger. The first episode that cannot be
    reserved stops the run from starting any other: what runs finishes, and the run ends with
    exit 3, "budget reached" (`runs.outcome`)."""

    def __init__(self, limit_usd: float, per_episode_usd: dict[str, float], spent_before: float = 0.0) -> None:
        self.limit_usd = limit_usd
        self.per_episode_usd = per_episode_usd
        self.spent_before = spent_before
        self.spent_now = 0.0  # what this session's finished episodes cost
        self.reserved = 0.0  # held by episodes in flight
        self.reached = False
        self.refused: tuple[str, float] | None = None  # the (system, reservation) that did not fit

    @property
    def spent(self) -> float:
        return self.spent_before + self.spent_now

    def reserve(self, system: str) -> float | None:
        """The reservation for one episode of `system`, or None: the budget cannot hold it (and from
        then on holds no other)."""
        need = self.per_episode_usd[system]
        if self.reached or self.spent + self.reserved + need > self.limit_usd:
            self.reached = True
            self.refused = self.refused or (system, need)
            return None
        self.reserved += need
        return need

    def settle(self, reservation: float, actual: float | None) -> None:
        """An episode ended: its reservation released, what it cost (None: unknown, the reservation) spent."""
        self.reserved = max(0.0, self.reserved - reservation)
        self.spent_now += reservation if actual is None else actual

    def line(self) -> str:
        return f"budget reached: spent ${self.spent:.4f} of ${self.limit_usd:.4f}; resume with a larger --budget-usd"

    def as_dict(self) -> dict[str, Any]:
        """summary.json's `budget`."""
        return {
            "limit_usd": self.limit_usd,
            "spent_usd": round(self.spent, 6),
            "reached": self.reached,
            "per_episode_reservation_usd": dict(self.per_episode_usd),
            "refused": {"system": self.refused[0], "reservation_usd": self.refused[1]} if self.refused else None,
        }


def spent_in(entries: list[Any]) -> float:
    """What the provider calls among ledger `entries` cost (cache hits and failed calls cost nothing;
    a call with no price adds nothing: a run with a budget has every price)."""
    return math.fsum(
        e.cost_usd for e in entries if e.is_model_call and not e.cache_hit and e.status == "ok" and e.cost_usd
    )
