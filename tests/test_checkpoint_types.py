"""Every type graph state can hold is registered with the checkpoint serializer (graphs/serde.py),
so checkpoints load back as the same types (and keep loading when LangGraph blocks unregistered
ones). tests/conftest.py fails any test during which LangGraph logs an unregistered or blocked type."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing

from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from atelier.agents.judges.base import JudgeResult
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.episode import build_episode_graph
from atelier.graphs.pipelines import PIPELINES
from atelier.graphs.serde import STATE_TYPES, serializer
from atelier.memory.base import UserContext
from tests.conftest import LoadRequest, tiny_cases


def _classes(hint) -> set[type]:
    """The classes a type hint can hold that are not plain data: models, dataclasses, enums."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _classes(typing.get_args(hint)[0])
    if origin is not None or isinstance(hint, types.UnionType):
        return set().union(*(_classes(arg) for arg in typing.get_args(hint)))
    if isinstance(hint, type) and (issubclass(hint, (BaseModel, enum.Enum)) or dataclasses.is_dataclass(hint)):
        return {hint}
    return set()


def state_classes(graph) -> set[type]:
    found: set[type] = set()
    for compiled in [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]:
        for schema in compiled.builder.schemas:
            for hint in typing.get_type_hints(schema, include_extras=True).values():
                found |= _classes(hint)
    return found


def test_every_class_in_any_pipelines_episode_state_is_registered():
    for name in PIPELINES.names():
        unregistered = state_classes(build_episode_graph(name)) - set(STATE_TYPES)
        assert not unregistered, f"pipeline {name}: add to graphs/serde.py STATE_TYPES: {unregistered}"


async def test_an_episode_checkpoint_loads_back_as_the_same_types(tmp_path, cache_dir):
    graph = build_episode_graph("direct", checkpointer=InMemorySaver(serde=serializer()))
    case = tiny_cases(LoadRequest(split="all", setting="context", limit=1, options=None))[0]
    context = EpisodeContext(system=SystemSpec(name="full", memory={"backend": "full"}), cache_dir=str(cache_dir))
    config = {"configurable": {"thread_id": "t1"}}
    await graph.ainvoke({"case": case}, config, context=context)
    state = (await graph.aget_state(config)).values  # read back from the checkpointer
    assert isinstance(state["case"], Case) and state["case"] == case
    assert "view" not in state  # derived from the case when needed, never kept in a checkpoint
    assert isinstance(state["user_context"], UserContext)
    assert isinstance(state["response"], SystemResponse)
    assert [type(j) for j in state["judgments"]] == [JudgeResult]
