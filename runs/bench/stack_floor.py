"""What the stack costs before Atelier adds anything, on this machine: litellm's own CPU per
completion (`mock_response`: no model, no network) and a bare one-node LangGraph invocation (no
checkpointer). `atelier bench graph` and `atelier bench runner` print it beside their figures, so a
framework figure can be read against what the chosen libraries alone take."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from atelier.agents.answerer import answer_messages
from atelier.agents.models.litellm_setup import configured_litellm, litellm_call_scope
from atelier.agents.models.scripted import PROVIDER
from atelier.benchmarks.case import CaseView


class _State(TypedDict, total=False):
    text: str


async def _answer(state: _State) -> _State:
    return {"text": state.get("text", "") + "."}


def _one_node_graph():
    builder = StateGraph(_State)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "answer")
    return builder.compile()


async def _cpu_ms_per_step(step: Callable[[], Awaitable[object]], repeats: int) -> float:
    """The median over 5 batches of `repeats` steps (after a warm-up) of CPU ms per step."""
    for _ in range(20):
        await step()
    times = []
    for _ in range(5):
        cpu = time.process_time()
        for _ in range(repeats):
            await step()
        times.append((time.process_time() - cpu) * 1000 / repeats)
    await asyncio.sleep(0.05)  # litellm's success logging, if a callback wants it, runs as tasks: let them finish
    return statistics.median(times)


async def measure_stack_floor(view: CaseView, repeats: int = 200) -> dict[str, float]:
    """CPU ms per litellm completion of the direct answer's prompt for `view` and per one-node
    LangGraph invocation."""
    messages = answer_messages(view, "")
    litellm = configured_litellm()
    graph = _one_node_graph()

    async def call() -> None:
        with litellm_call_scope():  # as the gateway calls it
            await litellm.acompletion(
                model=f"{PROVIDER}/{PROVIDER}", messages=messages, mock_response="A floor answer."
            )

    async def invoke() -> None:
        await graph.ainvoke({"text": "q"})

    return {
        "litellm_ms_per_call": round(await _cpu_ms_per_step(call, repeats), 3),
        "langgraph_ms_per_one_node_episode": round(await _cpu_ms_per_step(invoke, repeats), 3),
    }
