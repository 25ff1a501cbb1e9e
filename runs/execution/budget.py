"""A run's budget (`[run] budget_usd`): what has been spent, what is reserved, whether it was reached."""

from __future__ import annotations

import asyncio
import math
from typing import Any


class Budget:
    """`[run] budget_usd`: no episode starts that could take spend past it.

    While an episode runs it holds a reservation: its system's forecast high end
    (`per_episode_usd_high`, from a forecast whose completion lengths are modelled, not `max_tokens`).
    When it ends the reservation is released for what its calls actually cost (its ledger lines; the
    whole reservation when that is unknown). Spend before this session (earlier sessions of the run
    folder, the preflight's probes) counts from the ledger.

    An episode whose reservation does not fit beside what is spent and what episodes in flight hold
    waits for them to end (they release what they did not spend) rather than ending the run: only
    when nothing is in flight and it still does not fit is the budget reached. So a run uses as much
    of its budget at any concurrency as it would one episode at a time, and spent + in flight never
    passes the budget (`peak_committed_usd`). Once reached, no other episode starts: what runs
    finishes, and the run ends with exit 3, "budget reached" (`runs.outcome`)."""

    def __init__(
        self,
        limit_usd: float,
        per_episode_usd: dict[str, float],
        spent_before: float = 0.0,
        expected_usd: dict[str, float] | None = None,
    ) -> None:
        self.limit_usd = limit_usd
        self.per_episode_usd = per_episode_usd
        self.expected_usd = expected_usd or {}
        self.spent_before = spent_before
        self.spent_now = 0.0  # what this session's finished episodes cost
        self.reserved = 0.0  # held by episodes in flight
        self.in_flight = 0
        self.peak_committed = 0.0  # the most spent + reserved ever stood at
        self.reached = False
        self.refused: tuple[str, float] | None = None  # the (system, reservation) that did not fit
        self._changed: asyncio.Condition | None = None  # made on the run's loop, at the first reservation

    @property
    def spent(self) -> float:
        return self.spent_before + self.spent_now

    def _fits(self, need: float) -> bool:
        return self.spent + self.reserved + need <= self.limit_usd

    def try_reserve(self, system: str) -> float | None:
        """The reservation for one episode of `system` if it fits now (None: it does not, or the
        budget was reached); never waits."""
        need = self.per_episode_usd[system]
        if self.reached or not self._fits(need):
            return None
        self.reserved += need
        self.in_flight += 1
        self.peak_committed = max(self.peak_committed, self.spent + self.reserved)
        return need

    async def reserve(self, system: str) -> float | None:
        """The reservation for one episode of `system`, once it fits beside the episodes in flight;
        None when it cannot fit even with none in flight (the budget is then reached, and holds no
        other episode)."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            while True:
                granted = self.try_reserve(system)
                if granted is not None or self.reached:
                    return granted
                if self.in_flight == 0:
                    self.reached = True
                    self.refused = self.refused or (system, self.per_episode_usd[system])
                    self._changed.notify_all()
                    return None
                await self._changed.wait()

    def release(self, reservation: float, actual: float | None) -> None:
        """An episode ended: its reservation released, what it cost (None: unknown, the reservation) spent."""
        self.reserved = max(0.0, self.reserved - reservation)
        self.in_flight = max(0, self.in_flight - 1)
        self.spent_now += reservation if actual is None else actual
        self.peak_committed = max(self.peak_committed, self.spent + self.reserved)

    async def settle(self, reservation: float, actual: float | None) -> None:
        """`release`, and wake the episodes waiting for room."""
        self.release(reservation, actual)
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def line(self) -> str:
        return f"budget reached: spent ${self.spent:.4f} of ${self.limit_usd:.4f}; resume with a larger --budget-usd"

    def as_dict(self) -> dict[str, Any]:
        """summary.json's `budget`."""
        return {
            "limit_usd": self.limit_usd,
            "spent_usd": round(self.spent, 6),
            "reached": self.reached,
            "peak_committed_usd": round(self.peak_committed, 6),
            "per_episode_reservation_usd": dict(self.per_episode_usd),
            "per_episode_expected_usd": dict(self.expected_usd),
            "refused": {"system": self.refused[0], "reservation_usd": self.refused[1]} if self.refused else None,
        }


def spent_in(entries: list[Any]) -> float:
    """What the provider calls among ledger `entries` cost (cache hits and failed calls cost nothing;
    a call with no price adds nothing: a run with a budget has every price)."""
    return math.fsum(
        e.cost_usd for e in entries if e.is_model_call and not e.cache_hit and e.status == "ok" and e.cost_usd
    )
