"""The run checkpointer's serializer: each large state value stored once, everything loads back."""

from __future__ import annotations

import operator
import sqlite3
from typing import Annotated

import pytest
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from atelier.benchmarks.common.errors import DataError
from atelier.graphs.persistence import RunSerializer, run_checkpointer
from atelier.memory.base import UserContext


def test_large_values_are_stored_once_and_load_back_in_place(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "c.sqlite"))
    serde = RunSerializer(conn)
    serde.setup()
    memory = UserContext(backend="full", form="raw", text="I am vegetarian. " * 200, event_ids=["e1"], tokens=900)
    checkpoints = [
        {"v": 1, "id": str(i), "channel_values": {"user_context": memory, "step": i, "case_id": "q1"}}
        for i in range(10)
    ]
    blobs = [serde.dumps_typed(c) for c in checkpoints]
    write = serde.dumps_typed(memory)  # a pending write of the same value
    assert conn.execute("SELECT COUNT(*) FROM checkpoint_values").fetchone()[0] == 1  # ten checkpoints, one copy
    assert all(len(blob) < 300 for _, blob in blobs)  # each checkpoint holds a reference, not the text
    fresh = RunSerializer(conn)  # another process reading the folder: nothing cached
    loaded = [fresh.loads_typed(b) for b in blobs]
    assert [c["channel_values"]["step"] for c in loaded] == list(range(10))
    assert all(c["channel_values"]["user_context"] == memory for c in loaded)
    assert fresh.loads_typed(write) == memory
    first, second = loaded[0]["channel_values"]["user_context"], loaded[1]["channel_values"]["user_context"]
    first.event_ids.append("changed")  # a reducer mutating one checkpoint's value leaves the others alone
    assert second.event_ids == ["e1"]
    small = serde.dumps_typed({"channel_values": {"x": "short"}})
    assert fresh.loads_typed(small) == {"channel_values": {"x": "short"}}
    # what stays inline is compressed only from 2 KB: a step's usual 1-2 KB is stored as it is
    many = {"channel_values": {f"channel_{i}": f"v{i}" for i in range(40)}}
    most = {"channel_values": {f"channel_{i}": f"v{i}" for i in range(400)}}
    (kind, blob), (big_kind, big_blob) = serde.dumps_typed(many), serde.dumps_typed(most)
    assert not kind.endswith("+zlib") and 512 < len(blob) < 2048
    assert big_kind.endswith("+zlib") and len(big_blob) < 2048
    assert fresh.loads_typed((kind, blob)) == many and fresh.loads_typed((big_kind, big_blob)) == most


def test_a_missing_value_is_a_clear_error(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "c.sqlite"))
    serde = RunSerializer(conn)
    serde.setup()
    blob = serde.dumps_typed({"channel_values": {"text": "x" * 5000}})
    conn.execute("DELETE FROM checkpoint_values")
    with pytest.raises(DataError, match="is missing from checkpoint_values"):
        RunSerializer(conn).loads_typed(blob)


def test_a_channel_whose_version_did_not_move_is_not_serialized_again(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "c.sqlite"), isolation_level=None)
    serde = RunSerializer(conn)
    serde.setup()
    serialized = []
    dumps = serde.serde.dumps_typed
    serde.serde.dumps_typed = lambda value: serialized.append(value) or dumps(value)  # type: ignore[method-assign]
    hits = [{"url": f"https://example.org/{i}", "title": "t" * 40} for i in range(20)]

    def checkpoint(value, version):
        return {"channel_values": {"hits": value}, "channel_versions": {"hits": version}}

    serde.dumps_typed(checkpoint(hits, "2.1"))
    serde.dumps_typed(checkpoint(hits, "2.1"))  # the next step's checkpoint: same version, same object
    assert sum(v is hits for v in serialized) == 1
    serde.dumps_typed(checkpoint(hits, "3.1"))  # a new version is serialized again
    equal = [dict(h) for h in hits]
    serde.dumps_typed(checkpoint(equal, "3.1"))  # so is another object under a version already seen
    assert sum(v is hits for v in serialized) == 2 and sum(v is equal for v in serialized) == 1

    serde.rolled_back()  # SQLite undid the open transaction: its values must be inserted again
    conn.execute("DELETE FROM checkpoint_values")
    blob = serde.dumps_typed(checkpoint(equal, "3.1"))  # remembered before the rollback
    assert RunSerializer(conn).loads_typed(blob)["channel_values"]["hits"] == hits


class _Seen(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]


def _fan_out_graph(runs: dict[str, int], fail_b: list[bool]):
    """prep -> (a, b) in parallel; b raises while fail_b[0]."""

    def node(name: str):
        def run(state: _Seen) -> _Seen:
            runs[name] = runs.get(name, 0) + 1
            if name == "b" and fail_b[0]:
                raise RuntimeError("b failed")
            return {"seen": [name]}

        return run

    builder = StateGraph(_Seen)
    for name in ("prep", "a", "b"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "prep")
    builder.add_edge("prep", "a")
    builder.add_edge("prep", "b")
    return builder


def _writes(folder, thread: str) -> list[tuple[str, str]]:
    with sqlite3.connect(str(folder / "checkpoints.sqlite")) as conn:  # another reader: committed rows only
        return conn.execute(
            "SELECT task_path, channel FROM writes WHERE thread_id = ? ORDER BY rowid", (thread,)
        ).fetchall()


async def test_pending_writes_folded_into_a_checkpoint_are_never_written_and_a_cut_step_resumes(tmp_path):
    runs: dict[str, int] = {}
    fail_b = [True]
    async with run_checkpointer(tmp_path) as saver:
        graph = _fan_out_graph(runs, fail_b).compile(checkpointer=saver)
        done = {"configurable": {"thread_id": "done"}}
        fail_b[0] = False
        assert (await graph.ainvoke({"seen": []}, done))["seen"] == ["prep", "a", "b"]
        saver.commit()
        assert _writes(tmp_path, "done") == []  # every step's writes went into the next checkpoint
        assert len(list(saver.list(done))) == 4  # the checkpoints (the trace) are all there

        fail_b[0] = True
        cut = {"configurable": {"thread_id": "cut"}}
        with pytest.raises(RuntimeError, match="b failed"):
            await graph.ainvoke({"seen": []}, cut)
        fail_b[0] = False  # another episode's steps, before anything is committed, fold only their own writes
        assert (await graph.ainvoke({"seen": []}, {"configurable": {"thread_id": "other"}}))["seen"] == [
            "prep",
            "a",
            "b",
        ]
        pending = saver.get_tuple(cut).pending_writes  # in this process, before any commit
        assert ("seen", ["a"]) in [(channel, value) for _, channel, value in pending]
        saver.commit()
        written = _writes(tmp_path, "cut")  # the cut step's writes: a's output and b's error; not prep's
        assert any(channel == "seen" for _, channel in written) and any(c == "__error__" for _, c in written)
        assert all("prep" not in path for path, _ in written)

        runs.clear()
        assert (await graph.ainvoke(None, cut))["seen"] == ["prep", "a", "b"]
        assert runs == {"b": 1}  # a's write was kept: only the failed task ran again


async def test_a_cut_steps_writes_reach_the_file_at_the_timed_commit(tmp_path):
    runs: dict[str, int] = {}
    async with run_checkpointer(tmp_path) as saver:
        graph = _fan_out_graph(runs, [True]).compile(checkpointer=saver)
        cut = {"configurable": {"thread_id": "cut"}}
        with pytest.raises(RuntimeError):
            await graph.ainvoke({"seen": []}, cut)
        saver.commit_every_s = 0.0  # the next statement of any episode commits
        await saver.adelete_thread("another")
        assert any(channel == "seen" for _, channel in _writes(tmp_path, "cut"))
