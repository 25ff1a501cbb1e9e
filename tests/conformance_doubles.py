"""Systems that each break one clause of a protocol's contract, for tests/test_conformance.py: every
clause the kit checks has an input that must fail it. They are plugins named by `module:attr`
(`tests.conformance_doubles:LeakyMemory`), as a researcher's own would be."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel

from atelier.agents.judges.base import Judge, JudgeConfig, JudgeEnv, JudgeResult
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.case import Case, ExplicitPersona, HistoryEvent
from atelier.benchmarks.common.degradation import degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.memory.base import MemoryBackend, MemoryQuery, UserContext, digest_of
from atelier.memory.budget import pack_events, render_event

# --------------------------------------------------------------------------- memory


class _Events(MemoryBackend):
    """A correct raw-history backend the doubles below each break in one way."""

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self.held: dict[str, dict[str, HistoryEvent]] = {}

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        store = self.held.setdefault(user_id, {})
        for event in events:
            store.setdefault(event.id, event)

    def events(self, user_id: str) -> list[HistoryEvent]:
        return list(self.held.get(user_id, {}).values())

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        packed = pack_events(self.events(user_id), self.budget(budget))
        return UserContext(
            backend=self.name,
            form="raw" if packed.ids else "none",
            text=packed.text,
            event_ids=packed.ids,
            tokens=packed.tokens,
            degraded=packed.degraded("recall"),
        )

    async def state_digest(self, user_id: str) -> str:
        return digest_of(self.events(user_id))


class SoundMemory(_Events):
    """Keeps every clause (the doubles' control)."""


class RepeatingMemory(_Events):
    """Ingest is not idempotent: an event given twice is held twice."""

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        store = self.held.setdefault(user_id, {})
        for event in events:
            store[f"{event.id}#{len(store)}"] = event


class SharedMemory(_Events):
    """One pool for every user: users see each other."""

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        await super().ingest("everyone", events)

    def events(self, user_id: str) -> list[HistoryEvent]:
        return super().events("everyone")


class GoldReadingMemory(_Events):
    """Reaches for the whole case (gold included) among the cases a run remembered."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        from atelier.graphs.inputs import _remembered

        context = await super().context(user_id, query, budget)
        gold = [
            c.gold.information_need for c in _remembered.values() if c.user_id == user_id and c.gold.information_need
        ]
        return context.model_copy(update={"text": context.text + "".join(f"\n{g}" for g in gold[:1])})


class ProcessBoundMemory(_Events):
    """Its state depends on the process: a new process never rebuilds it exactly."""

    async def state_digest(self, user_id: str) -> str:
        return digest_of([self.events(user_id), os.getpid(), random.random()])


class OverBudgetMemory(_Events):
    """Ignores its budget: every event it holds, then notes of its own twice as long as the budget."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        notes = " ".join(f"note{i}" for i in range(2 * self.budget(budget)))
        text = "\n".join([*(e.render() for e in self.events(user_id)), notes])
        ids = [e.id for e in self.events(user_id)]
        return UserContext(backend=self.name, form="raw", text=text, event_ids=ids, tokens=len(text.split()))


class InventingMemory(_Events):
    """Names an event the user never had, beside the real ones."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        context = await super().context(user_id, query, budget)
        return context.model_copy(update={"event_ids": [*context.event_ids, f"{user_id}:remembered-1"]})


class PersonaDroppingMemory(_Events):
    """Drops the explicit persona without a word."""

    def events(self, user_id: str) -> list[HistoryEvent]:
        return [e for e in super().events(user_id) if not isinstance(e, ExplicitPersona)]


class PersonaCheatMemory(_Events):
    """Claims the one way over a budget — the explicit persona alone, kept whole, a degradation saying
    so — while its text holds the history as well, over the budget."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        events = self.events(user_id)
        personas = [e.id for e in events if isinstance(e, ExplicitPersona)][-1:]
        lines = [render_event(e) for e in sorted(events, key=lambda e: not isinstance(e, ExplicitPersona))]
        words = max(1, len(" ".join(lines).split()))
        text = "\n".join(lines * (2 + 2 * self.budget(budget) // words))  # a token per word at least: over
        said = degradation("memory_budget_cut", "recall", "the explicit persona alone exceeds the budget: kept whole")
        return UserContext(
            backend=self.name, form="raw", text=text, event_ids=personas, tokens=len(text.split()), degraded=[said]
        )


class DictContextMemory(_Events):
    """Returns its context as a plain dict where a UserContext belongs."""

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> Any:
        return (await super().context(user_id, query, budget)).model_dump()


# --------------------------------------------------------------------------- pipelines


class _State(PipelineInput, PipelineOutput, total=False):
    pass


def _graph(node):
    graph = StateGraph(_State, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput)
    graph.add_node("answer", node)
    graph.add_edge(START, "answer")
    return graph.compile()


def dict_response():
    """Returns a plain dict where a SystemResponse belongs."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"response": {"text": "an answer"}}

    return _graph(answer)


def no_response():
    """Ends without a `response` at all."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {}

    return _graph(answer)


def text_response():
    """Returns the answer's text where a SystemResponse belongs."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"response": "an answer"}

    return _graph(answer)


def edited_response():
    """Sets its response's text to None after making it (pydantic does not validate an assignment)."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        response = SystemResponse(text="an answer")
        response.text = None  # type: ignore[assignment]
        return {"response": response}

    return _graph(answer)


def invented_citation():
    """Cites a page it never read."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        citation = Citation(source_id="s1", url="https://example.org/never-read", number=1)
        return {"response": SystemResponse(text="As a page says [1].", citations=[citation])}

    return _graph(answer)


def whole_state_output():
    """Compiled without an output schema, so its graph returns its whole state: a context of its own
    making (another user's event, negative tokens) would overwrite the one the memory gave."""

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        forged = UserContext(backend="forged", event_ids=["someone-else:e1"], text="")
        return {"response": SystemResponse(text="an answer"), "user_context": forged}

    graph = StateGraph(_State, context_schema=EpisodeContext)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph.compile()


def parent_user_context():
    """Writes a context of its own making straight into the episode's state (Command.PARENT), beside
    its response: another user's event, which would stand as the memory's context as recorded."""
    from langgraph.types import Command

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> Command:
        forged = UserContext(backend="forged", event_ids=["someone-else:e1"], text="")
        return Command(
            graph=Command.PARENT, update={"response": SystemResponse(text="an answer"), "user_context": forged}
        )

    return _graph(answer)


def parent_judgment():
    """Writes a judgment of its own into the episode's state (Command.PARENT), beside its response."""
    from langgraph.types import Command

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> Command:
        forged = JudgeResult(judge="lampqa_aspects", score=1.0, scale="0-1")
        return Command(
            graph=Command.PARENT, update={"response": SystemResponse(text="an answer"), "judgments": [forged]}
        )

    return _graph(answer)


def parent_response():
    """Sends only its response to the episode through Command.PARENT: the episode's own key, as returned."""
    from langgraph.types import Command

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> Command:
        return Command(graph=Command.PARENT, update={"response": SystemResponse(text="an answer")})

    return _graph(answer)


def _one_step(step, doc: str):
    """A one-step pipeline whose step the episode runs as its own node (`PipelineSpec.step`)."""
    from atelier.graphs.pipelines import PipelineSpec

    return PipelineSpec("one_step", doc, lambda: _graph(step), step=step)


async def _forging_step(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    forged = UserContext(backend="forged", event_ids=["someone-else:e1"], text="")
    return {"response": SystemResponse(text="an answer"), "user_context": forged}


def _judging_step(state: _State) -> Any:  # a plain def, asking no runtime
    from langgraph.types import Command

    forged = JudgeResult(judge="lampqa_aspects", score=1.0, scale="0-1")
    return Command(update={"response": SystemResponse(text="an answer"), "judgments": [forged]})


async def _answering_step(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    return {"response": SystemResponse(text=f"an answer for {runtime.context.system.name}")}


step_user_context = _one_step(_forging_step, "Its step returns a context of its own beside its response.")
step_judgment = _one_step(_judging_step, "Its step (a plain def) returns a Command writing a judgment of its own.")
step_response = _one_step(_answering_step, "Its step returns its response alone, read from the runtime it asks for.")


class _OddState(_State, total=False):
    odd: Any


def unwritable_state():
    """Keeps an object no serializer knows in its own state: no checkpoint can hold it."""

    async def think(state: _OddState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"odd": object()}

    async def answer(state: _OddState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"response": SystemResponse(text="an answer")}

    graph = StateGraph(
        _OddState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("think", think)
    graph.add_node("answer", answer)
    graph.add_edge(START, "think")
    graph.add_edge("think", "answer")
    return graph.compile()


def unwritable_input():
    """Hands an object no serializer knows to a graph of its own as its input (never in its own state):
    the inner graph's first checkpoint cannot hold it."""

    async def keep(state: _OddState) -> dict[str, Any]:
        return {}

    inner = StateGraph(_OddState)
    inner.add_node("keep", keep)
    inner.add_edge(START, "keep")
    helper = inner.compile()

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        await helper.ainvoke({"odd": object()})
        return {"response": SystemResponse(text="an answer")}

    return _graph(answer)


class _NoteState(_State, total=False):
    note: str


def sound_graph():
    """Keeps every clause: a note in its own state, then its response (the pipeline doubles' control)."""

    async def think(state: _NoteState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"note": "thinking"}

    async def answer(state: _NoteState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"response": SystemResponse(text=f"an answer after {state['note']}")}

    graph = StateGraph(
        _NoteState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("think", think)
    graph.add_node("answer", answer)
    graph.add_edge(START, "think")
    graph.add_edge("think", "answer")
    return graph.compile()


class Scratch(BaseModel):
    """A type of its own in graph state, not declared to the checkpoint serializer."""

    note: str


class _ScratchState(_State, total=False):
    scratch: Scratch


def undeclared_state_type():
    async def think(state: _ScratchState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"scratch": Scratch(note="thinking")}

    async def answer(state: _ScratchState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        return {"response": SystemResponse(text=f"an answer after {state['scratch'].note}")}

    graph = StateGraph(
        _ScratchState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("think", think)
    graph.add_node("answer", answer)
    graph.add_edge(START, "think")
    graph.add_edge("think", "answer")
    return graph.compile()


def declared_state_type():
    """The same graph, its state type declared to the serializer."""
    return undeclared_state_type()


declared_state_type.state_types = (Scratch,)  # type: ignore[attr-defined]


def untyped_interrupt():
    """Asks the user with a plain dict, not a ClarifyRequest."""
    from langgraph.types import interrupt

    async def answer(state: _State, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
        reply = interrupt({"ask": "which city?"})
        return {"response": SystemResponse(text=f"for {reply}")}

    return _graph(answer)


# --------------------------------------------------------------------------- judges


class OffScale(Judge):
    """Declares 0-1 and scores 7."""

    name = "off_scale"
    config_model = JudgeConfig

    def score_of(self, case: Case) -> float:
        return 7.0

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        return self.result(self.score_of(case))


class NotFinite(OffScale):
    """Declares 1-5 and scores NaN (or infinity)."""

    name = "not_finite"
    scale = "1-5"

    def score_of(self, case: Case) -> float:
        return float("nan") if len(case.id) % 2 else float("inf")


class Verdict(BaseModel):
    reasoning: str
    good: bool


class Credulous(Judge):
    """Scores whatever its model says, however degenerate its reasoning."""

    name = "credulous"
    config_model = JudgeConfig

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        verdict = await env.gateway.structured(self.role, [{"role": "user", "content": response.text or "-"}], Verdict)
        return self.result(float(verdict.good), details={"reasoning": verdict.reasoning})
