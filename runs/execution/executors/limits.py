"""Model limits that hold across a whole Ray cluster: one `ModelLimits` actor per run, holding every
model's concurrency bound and requests-per-minute bucket, asked by the gateway of every worker.

The gateway keeps calling `semaphore(model, bound)` and `limiter(model, rpm)` as it does in one
process (`agents.models.gateway._ModelLimits`); `ClusterLimits` answers with objects of the same shape
whose waiting happens in the actor, so adding nodes never adds calls in flight or per minute.

A slot is a lease: released when the call ends, reclaimed when the node holding it dies (a killed
worker never releases), and, as a last resort, when it outlives `LEASE_TTL_S`. A local model
(`local/...`, a llama.cpp server each worker starts for itself) is bounded per node instead: it is
the node's CPU it spends, not a provider's quota.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # ray is imported where used
    from ray.actor import ActorHandle

LEASE_TTL_S = 900.0  # longer than any call may hold a slot (the gateway's timeout bounds each attempt)
_REAP_EVERY_S = 1.0


@dataclass
class _Bound:
    size: int
    leases: dict[str, tuple[float, str]] = field(default_factory=dict)  # lease -> (deadline, holder node)
    peak: int = 0
    granted: int = 0


class ModelLimitsActor:
    """The actor's body (wrapped by `ray.remote` in `limits_actor`): async, so waiters park here."""

    def __init__(self) -> None:
        self._bounds: dict[tuple[str, int], _Bound] = {}
        self._rates: dict[tuple[str, int], Any] = {}
        self._changed = asyncio.Condition()
        self._cancelled: set[str] = set()
        self._last_reap = 0.0

    async def acquire(self, model: str, size: int, lease: str, node: str) -> bool:
        """Wait for one of `size` slots of `model`; False when the caller gave up meanwhile."""
        bound = self._bounds.setdefault((model, size), _Bound(size))
        async with self._changed:
            while True:
                if lease in self._cancelled:
                    self._cancelled.discard(lease)
                    return False
                self._expire(bound)
                if len(bound.leases) < bound.size:
                    bound.leases[lease] = (time.monotonic() + LEASE_TTL_S, node)
                    bound.granted += 1
                    bound.peak = max(bound.peak, len(bound.leases))
                    return True
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=_REAP_EVERY_S)
                except TimeoutError:
                    self._reap_dead_nodes()

    async def release(self, model: str, size: int, lease: str) -> None:
        bound = self._bounds.get((model, size))
        async with self._changed:
            if bound is None or bound.leases.pop(lease, None) is None:
                self._cancelled.add(lease)  # released before granted: the waiter gave up
            self._changed.notify_all()

    async def wait_rate(self, model: str, rpm: int) -> None:
        from aiolimiter import AsyncLimiter

        # paced as the gateway paces it (agents/models/gateway.py): one request per 60/rpm s, a burst of two
        limiter = self._rates.setdefault((model, rpm), AsyncLimiter(2, 120 / rpm))
        await limiter.acquire()

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per model and bound: slots held now, the most ever held at once, slots granted."""
        return {
            f"{model}#{size}": {"held": len(b.leases), "peak": b.peak, "granted": b.granted}
            for (model, size), b in self._bounds.items()
        }

    def _expire(self, bound: _Bound) -> None:
        now = time.monotonic()
        for lease, (deadline, _) in list(bound.leases.items()):
            if deadline < now:
                del bound.leases[lease]

    def _reap_dead_nodes(self) -> None:
        now = time.monotonic()
        if now - self._last_reap < _REAP_EVERY_S or not any(b.leases for b in self._bounds.values()):
            return
        self._last_reap = now
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for bound in self._bounds.values():
            for lease, (_, node) in list(bound.leases.items()):
                if node not in alive:
                    del bound.leases[lease]
        self._changed.notify_all()


def limits_actor_name(run_id: str) -> str:
    return f"atelier-limits:{run_id}"


def start_limits_actor(run_id: str, node_id: str):
    """The run's limits actor, on the driver's node (it must outlive any worker node), owned by the
    driver (it ends with the run)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(ModelLimitsActor).options(
        name=limits_actor_name(run_id),
        num_cpus=0,
        max_concurrency=100_000,
        max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    )
    return actor.remote()


class ClusterLimits:
    """What a worker's gateway asks for a model's slot and rate (see `agents.models.gateway.set_model_limits`)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._actor: ActorHandle | None = None

    def actor(self):
        if self._actor is None:
            import ray

            self._actor = ray.get_actor(limits_actor_name(self.run_id))
        return self._actor

    def semaphore(self, model: str, bound: int) -> _Slot:
        return _Slot(self.actor(), _per_node(model), bound)

    def limiter(self, model: str, rpm: int) -> _Rate:
        return _Rate(self.actor(), model, rpm)


def _per_node(model: str) -> str:
    """A local model (`local/...`) is served by each node's own server: its bound holds per node."""
    from atelier.agents.models.local_model import is_local

    if not is_local(model):
        return model
    import ray

    return f"{model}@node:{ray.get_runtime_context().get_node_id()}"


class _Slot:
    def __init__(self, actor, model: str, size: int) -> None:
        self.actor, self.model, self.size = actor, model, size
        self.lease = uuid.uuid4().hex

    async def __aenter__(self) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()
        try:
            await self.actor.acquire.remote(self.model, self.size, self.lease, node)
        except asyncio.CancelledError:
            self.actor.release.remote(self.model, self.size, self.lease)  # frees it if granted meanwhile
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.actor.release.remote(self.model, self.size, self.lease)


class _Rate:
    def __init__(self, actor, model: str, rpm: int) -> None:
        self.actor, self.model, self.rpm = actor, model, rpm

    async def acquire(self) -> None:
        await self.actor.wait_rate.remote(self.model, self.rpm)
