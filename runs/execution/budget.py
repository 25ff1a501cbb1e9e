"""A run's budget (`[run] budget_usd`): what has been spent, what is held, whether it was reached."""

from __future__ import annotations

import asyncio
import math
from typing import Any


class Budget:
    """`[run] budget_usd`: no model call is sent that could take spend past it.

    **Calls** (the guard every priced call of the run's gateways passes, `agents.models.spend`):
    each holds its bound — its prompt's tokens and `max_tokens` at its role's price, so a judge's
    prompt that carries a long answer holds more — while it is in flight, and settles for what it
    cost when it answers (a failed call costs nothing). A call whose bound does not fit beside
    what is spent and what calls in flight hold waits for them to settle; only when nothing is in
    flight and it still does not fit is the budget reached, and the call is refused (its episode
    is left for a resume: its answered calls are in the response cache, so a resume does not pay
    for them again). So spent + the bounds in flight never passes the budget
    (`peak_committed_usd`), for answers of any length, at any concurrency.

    **Episodes**: one starts when its planned cost — the most a finished episode of its system
    has cost in this session, else (none yet) the forecast's expected cost of one — fits beside what is spent
    and what calls hold; one that cannot fit even once the calls in flight settle is not started,
    and the budget is reached. So a run of short answers goes on while an episode like those it ran
    still fits: it uses its budget to within about one episode's cost.

    With an executor whose calls run in other processes (Ray), the calls cannot be held here: each
    episode then holds its system's worst case (`worst_case_usd`: the forecast's calls at their
    high end, every completion at `max_tokens`) while it runs, and settles for what it cost.

    Once reached, no other episode starts and no other call is sent: the run ends with exit 3,
    "budget reached" (`runs.outcome`)."""

    def __init__(
        self,
        limit_usd: float,
        planned_usd: dict[str, float],
        spent_before: float = 0.0,
        *,
        worst_case_usd: dict[str, float] | None = None,
        hold_calls: bool = True,
    ) -> None:
        self.limit_usd = limit_usd
        self.planned_usd = dict(planned_usd)  # per system, what one episode is planned to cost
        self.worst_case_usd = dict(worst_case_usd or planned_usd)
        self.hold_calls = hold_calls  # False: the calls run elsewhere, each episode holds its worst case
        self.spent_before = spent_before
        self.spent_now = 0.0  # what this session's calls (or, not holding calls, its episodes) cost
        self.held = 0.0  # the bounds of the calls (or episodes) in flight
        self.in_flight = 0  # calls (or episodes) holding
        self.running: dict[str, int] = {}  # per system, episodes started and not finished
        self.peak_committed = 0.0  # the most spent + held ever stood at
        self.episode_costs: dict[str, float] = {}  # per system, the most a finished episode cost
        self.reached = False
        self.refused: tuple[str, float] | None = None  # what did not fit: (a system or "call", its need)
        self._changed: asyncio.Condition | None = None  # made on the run's loop, at the first wait

    @property
    def spent(self) -> float:
        return self.spent_before + self.spent_now

    @property
    def reserved(self) -> float:
        return self.held

    def _fits(self, need: float) -> bool:
        return self.spent + self.held + need <= self.limit_usd + 1e-12

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _reach(self, what: str, need: float) -> None:
        self.reached = True
        self.refused = self.refused or (what, need)

    # ------------------------------------------------------------------ calls (agents.models.spend.SpendGuard)

    async def hold(self, bound_usd: float) -> bool:
        """Hold a call's bound once it fits beside the calls in flight; False when it cannot fit even
        with none in flight (the budget is then reached)."""
        async with self._condition():
            while True:
                if self.reached:
                    return False
                if self._fits(bound_usd):
                    self.held += bound_usd
                    self.in_flight += 1
                    self.peak_committed = max(self.peak_committed, self.spent + self.held)
                    return True
                if self.in_flight == 0:
                    self._reach("call", bound_usd)
                    self._condition().notify_all()
                    return False
                await self._condition().wait()

    def settle(self, bound_usd: float, spent_usd: float) -> None:
        """A call (or, not holding calls, an episode) ended: its bound released, what it cost spent."""
        self.held = max(0.0, self.held - bound_usd)
        self.in_flight = max(0, self.in_flight - 1)
        self.spent_now += spent_usd
        self.peak_committed = max(self.peak_committed, self.spent + self.held)
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self._condition():
            self._condition().notify_all()

    # ------------------------------------------------------------------ episodes

    def planned(self, system: str) -> float:
        """What one more episode of `system` is planned to cost: the most one of it cost in this
        session, else (none finished yet) the forecast's expected cost."""
        return self.episode_costs.get(system, self.planned_usd.get(system, 0.0))

    async def start(self, system: str) -> float | None:
        """Start one episode of `system` once its planned cost (its worst case, not holding calls)
        fits; None when it cannot (the budget is then reached, and no other episode starts).
        Returns what the episode holds (0 when its calls hold for themselves). While none of the
        system's episodes has finished, its plan is the forecast's: one that does not fit then
        waits for an episode of it in flight to say what one really costs."""
        async with self._condition():
            while True:
                need = self.planned(system) if self.hold_calls else self.worst_case_usd[system]
                if self.reached:
                    return None
                if self._fits(need):
                    self.running[system] = self.running.get(system, 0) + 1
                    if self.hold_calls:
                        return 0.0
                    self.held += need
                    self.in_flight += 1
                    self.peak_committed = max(self.peak_committed, self.spent + self.held)
                    return need
                learning = self.hold_calls and system not in self.episode_costs and self.running.get(system, 0)
                if self.spent + need > self.limit_usd and not learning:  # spend only grows: it never fits
                    self._reach(system, need)
                    self._condition().notify_all()
                    return None
                await self._condition().wait()

    def finish(self, system: str, held: float, cost: float | None, *, whole: bool = True) -> None:
        """An episode ended having cost `cost` (None: unknown). Holding its calls, they settled as they
        went; else its hold is released and what it cost (its whole hold when unknown) spent. Not
        `whole` (cut short by the budget, or only judged again): no cost to plan episodes by."""
        self.running[system] = max(0, self.running.get(system, 0) - 1)
        if cost is not None and whole:
            self.episode_costs[system] = max(self.episode_costs.get(system, 0.0), cost)
        if not self.hold_calls:
            self.settle(held, held if cost is None else cost)
        elif self._changed is not None:
            asyncio.get_running_loop().create_task(self._wake())

    def line(self) -> str:
        # from the figure summary.json keeps (6 places), so the line and the summary never read apart
        spent = round(self.spent, 6)
        return f"budget reached: spent ${spent:.4f} of ${self.limit_usd:.4f}; resume with a larger --budget-usd"

    def as_dict(self) -> dict[str, Any]:
        """summary.json's `budget`."""
        return {
            "limit_usd": self.limit_usd,
            "spent_usd": round(self.spent, 6),
            "reached": self.reached,
            "peak_committed_usd": round(self.peak_committed, 6),
            "holds": "calls" if self.hold_calls else "episodes",
            "per_episode_planned_usd": {system: round(self.planned(system), 6) for system in self.planned_usd},
            "per_episode_worst_case_usd": {k: round(v, 6) for k, v in self.worst_case_usd.items()},
            "refused": {"what": self.refused[0], "need_usd": round(self.refused[1], 6)} if self.refused else None,
        }


def spent_in(entries: list[Any]) -> float:
    """What the provider calls among ledger `entries` cost (cache hits and failed calls cost nothing;
    a call with no price adds nothing: a run with a budget has every price)."""
    return math.fsum(
        e.cost_usd for e in entries if e.is_model_call and not e.cache_hit and e.status == "ok" and e.cost_usd
    )
