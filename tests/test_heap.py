"""Episodes run with the heap settled (graphs/heap.py): what was alive when they started is out of
the collector's reach while they run, and handed back afterwards."""

from __future__ import annotations

import gc
import weakref

from atelier.agents.models.gateway import Gateway
from atelier.graphs.heap import settled_heap
from atelier.runs.execution.runner import run_recipe
from tests.test_runner import recipe


class _Node:
    pass


def test_objects_alive_at_the_start_are_not_collected_until_the_block_ends():
    assert gc.get_freeze_count() == 0
    cycle = _Node()
    cycle.self = cycle  # only the cyclic collector can free it
    alive = weakref.ref(cycle)
    with settled_heap():
        assert gc.get_freeze_count() > 0
        del cycle
        gc.collect()
        assert alive() is not None  # frozen: a full collection did not walk it
        made_inside = _Node()
        made_inside.self = made_inside
        inside = weakref.ref(made_inside)
        del made_inside
        gc.collect()
        assert inside() is None  # what episodes allocate is collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None  # handed back, and collected


def test_overlapping_blocks_hand_the_heap_back_when_the_last_one_ends():
    outer, inner = settled_heap(), settled_heap()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # blocks of two runs need not nest
    assert gc.get_freeze_count() > 0  # still settled for the block that runs on
    inner.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


def test_a_runs_episodes_run_with_the_heap_settled_and_it_is_handed_back(tmp_path, cache_dir, monkeypatch):
    frozen_during_calls: list[int] = []
    original = Gateway._request

    async def spy(self, role, messages, **kwargs):
        frozen_during_calls.append(gc.get_freeze_count())
        return await original(self, role, messages, **kwargs)

    monkeypatch.setattr(Gateway, "_request", spy)
    run_recipe(recipe(tmp_path), progress=False)
    system_and_aspect_calls = 6 + 12  # as in test_a_run_writes_every_output
    assert len(frozen_during_calls) == system_and_aspect_calls
    assert all(count > 100_000 for count in frozen_during_calls)  # the imported libraries, at least
    assert gc.get_freeze_count() == 0
