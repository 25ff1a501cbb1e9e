"""The pipeline protocol's contract (graphs/pipelines.py, graphs/inputs.py), clause by clause.

- the response schema: a pipeline's graph returns `{"response": SystemResponse}`. Every episode
  holds its pipeline to it as the pipeline ends (graphs/episode.py): a missing or malformed
  response — or one whose fields do not hold what they say (set after it was made), or that
  cannot be written as JSON — fails the episode naming the pipeline and the key or field
  (`pipeline_no_response`);
- citations only to sources read: every citation is a text in the run's source store (by its
  sha256) or a URL the run's web fetched or found; every episode holds its response to it as the
  pipeline ends (a citation to nothing read fails the episode: `pipeline_unread_citation`), and
  `atelier check pipeline` applies the same `unread_citations` (and, on its synthetic cases only,
  also asks that every `[n]` marker name a citation: a bracketed year reads like one);
- a pipeline's graph returns nothing but its response (`output_problem`): a graph whose output
  schema holds other keys of the episode's state (`user_context`, `judgments`) is refused when the
  episode graph is built, naming the pipeline and the keys, and `atelier check` says the same. A
  node of its graph that writes them past its output schema (`Command(graph=Command.PARENT,
  update=...)`) or sends the episode to a node fails the episode on every call, by the response
  schema (`pipeline_no_response`, naming the pipeline and the keys: `sending_only_its_response`,
  around the pipeline's graph in the episode and in a conversation);
- checkpointable state: a value in a graph's state that the run's checkpoint serializer cannot
  write fails the episode as it is checkpointed, naming the state key and the type
  (`state_not_checkpointable`, graphs/persistence.py `unwritable`); `atelier check pipeline` also
  reads every checkpoint back and asks that each value come back with its type;
- a clean interrupt/resume where it asks the user: `atelier check pipeline` only
  (runs/studies/conformance/pipeline.py), which applies `response_problem` to the responses of
  its synthetic cases as well.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import ParentCommand
from langgraph.graph import END
from langgraph.types import Command, Send

from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.contract import ContractBroken, ContractClause, field_problem
from atelier.benchmarks.common.errors import ConfigError

PROTOCOL = "pipeline"
RESPONSE = ContractClause(PROTOCOL, "the response schema", "pipeline_no_response")
CITATIONS = ContractClause(PROTOCOL, "citations only to sources read", "pipeline_unread_citation")
CHECKPOINTS = ContractClause(PROTOCOL, "checkpointable state", "state_not_checkpointable")
INTERRUPT = ContractClause(PROTOCOL, "a clean interrupt/resume where it asks the user")


def response_problem(out: Mapping[str, Any], pipeline: str) -> str | None:
    """Why `out` (what the pipeline's graph left in the state) breaks 'the response schema'; None
    when its `response` is a SystemResponse whose fields hold what they say and can be written as
    JSON (a field set after the response was made, or one made with `model_construct`, is not
    validated by pydantic: it is here, before a results file is written that could not be read)."""
    response = out.get("response")
    if isinstance(response, SystemResponse):
        return _fields_problem(response, pipeline)
    if response is None:
        return (
            f'pipeline {pipeline!r} returned no `response` (a pipeline\'s graph returns {{"response": SystemResponse}})'
        )
    return (
        f"pipeline {pipeline!r} returned `response` as a {type(response).__name__}, not a SystemResponse "
        "(atelier.agents.response)"
    )


def _fields_problem(response: SystemResponse, pipeline: str) -> str | None:
    problem = field_problem(response)
    if problem is None:
        return None
    if problem.unwritable:
        return f"pipeline {pipeline!r} returned a `response` that cannot be written as JSON: {problem.unwritable}"
    field = problem.field or "(response)"
    if problem.missing:
        return f"pipeline {pipeline!r} returned a `response` without its field {field!r}"
    return (
        f"pipeline {pipeline!r} returned a `response` whose field {field!r} is invalid: {problem.message} "
        f"(got {problem.shown})"
    )


def checked_response(out: Mapping[str, Any], pipeline: str, step: str) -> SystemResponse:
    """`out`'s response; ContractBroken (the episode fails) when the pipeline broke the response schema."""
    problem = response_problem(out, pipeline)
    if problem is not None:
        raise ContractBroken(RESPONSE, problem, step)
    return out["response"]


def unread_citations(response: SystemResponse, stored: Callable[[str], bool], seen: Callable[[str], bool]) -> list[str]:
    """What `response` cites that the run did not read, a line each: a citation is read when its text
    is `stored` (by sha256), its URL was `seen` (asked of or found by the run's web), or the response
    records that reading it failed (`fetch_failed` naming the URL: a resumed episode's web may not
    have been asked in this process)."""
    unread = []
    failed = [d.detail for d in response.degraded if d.kind == "fetch_failed"]
    for citation in response.citations:
        if (citation.sha256 and stored(citation.sha256)) or (citation.url and seen(citation.url)):
            continue
        if citation.url and any(citation.url in detail for detail in failed):
            continue
        unread.append(
            f"citation {citation.source_id!r} ({citation.url or 'no URL'}) is no page this run fetched or found "
            "and no text it read"
        )
    return unread


def checked_citations(
    response: SystemResponse, pipeline: str, step: str, stored: Callable[[str], bool], seen: Callable[[str], bool]
) -> None:
    """ContractBroken (the episode fails) when `response` cites something the run did not read."""
    unread = unread_citations(response, stored, seen)
    if unread:
        more = f" (and {len(unread) - 3} more)" if len(unread) > 3 else ""
        raise ContractBroken(CITATIONS, f"pipeline {pipeline!r}: {'; '.join(unread[:3])}{more}", step)


class PipelineOutputError(ConfigError):
    """A pipeline's graph returns keys of the episode's state beside its response (`output_problem`)."""


# the keys a pipeline's graph may return: what the episode takes from it
OUTPUT_KEYS = frozenset({"response"})


def output_problem(graph: Any, pipeline: str, episode_keys: Collection[str]) -> str | None:
    """Why a pipeline's compiled `graph` may not run inside an episode: its output schema holds keys of
    the episode's state (`episode_keys`) other than `response`, which it would overwrite — the
    memory's context as recorded, the judgments. None when it returns only its response."""
    channels = getattr(graph, "output_channels", None)
    if channels is None:
        return None
    names = [channels] if isinstance(channels, str) else list(channels)
    clashing = sorted(set(names) & set(episode_keys) - OUTPUT_KEYS)
    if not clashing:
        return None
    return (
        f"the graph of pipeline {pipeline!r} returns {', '.join(map(repr, clashing))} beside its response, which would "
        "overwrite the episode's own state (a graph compiled without an output schema returns its whole state): "
        "a pipeline's graph returns only `response` — compile it with output_schema=PipelineOutput "
        "(atelier.graphs.inputs)"
    )


def parent_problem(command: Command, pipeline: str, how: str = "through Command.PARENT") -> str | None:
    """Why a Command a node of the pipeline's graph sent to the graph it runs in
    (`Command(graph=Command.PARENT, ...)`; `how` says so) breaks 'the response schema': it writes keys of
    that graph's state other than `response` (the memory's context as recorded, the judgments), or
    sends it to a node of its own choosing. None when it sends only its response."""
    written = sorted({key for key, _ in command._update_as_tuples()} - OUTPUT_KEYS)
    gotos = command.goto if isinstance(command.goto, (list, tuple)) else [command.goto]
    nodes = sorted({go.node if isinstance(go, Send) else str(go) for go in gotos if go and go != END})
    return _sent_problem(written, nodes, pipeline, how)


def _sent_problem(written: list[str], nodes: list[str], pipeline: str, how: str) -> str | None:
    if not written and not nodes:
        return None
    did = [f"wrote {', '.join(map(repr, written))} into the episode's state"] if written else []
    did += [f"sent the episode to {', '.join(map(repr, nodes))}"] if nodes else []
    return (
        f"pipeline {pipeline!r} {' and '.join(did)} {how}: a pipeline sends the episode only "
        'its response — return {"response": SystemResponse}'
    )


def step_problem(result: Any, pipeline: str) -> str | None:
    """Why what a one-step pipeline's step returned (`PipelineSpec.step`, run as the episode's own node:
    no output schema stands between them) breaks 'the response schema': an update holding keys of the
    episode's state other than `response`, or a Command writing them or sending the episode on."""
    if isinstance(result, Command):
        return parent_problem(result, pipeline, "as its step's Command")
    if isinstance(result, Mapping):
        return _sent_problem(sorted(set(map(str, result)) - OUTPUT_KEYS), [], pipeline, "as its step's update")
    return None


def returning_only_its_response(step: Callable[..., Any], pipeline: str, node: str) -> Callable[..., Any]:
    """A one-step pipeline's `step` as the episode's node, held to 'the response schema' on every call
    (`step_problem`: ContractBroken naming the pipeline and the keys). LangGraph sees the step's own
    signature and annotations (`functools.wraps`), so it is given what it asks for (the runtime, the
    config) and Studio draws its edges as before."""
    if inspect.iscoroutinefunction(step):

        @functools.wraps(step)
        async def held(*args: Any, **kwargs: Any) -> Any:
            return _only_response(await step(*args, **kwargs), pipeline, node)

        return held

    @functools.wraps(step)
    def held_sync(*args: Any, **kwargs: Any) -> Any:
        return _only_response(step(*args, **kwargs), pipeline, node)

    return held_sync


def _only_response(result: Any, pipeline: str, node: str) -> Any:
    problem = step_problem(result, pipeline)
    if problem is not None:
        raise ContractBroken(RESPONSE, problem, node)
    return result


def sending_only_its_response(graph: Any, pipeline: str, step: str) -> Callable[..., Awaitable[Any]]:
    """A pipeline's compiled `graph` as the node of the graph it runs in (the episode, a conversation),
    held to 'the response schema' on every call: a Command one of its nodes sends that graph
    (`Command(graph=Command.PARENT)`, which passes by its output schema and `output_problem`) and that
    writes more than its response fails the episode (ContractBroken naming the pipeline and the keys);
    one carrying only its response goes on as LangGraph takes it. Only what this call sends is looked
    at, never the state the thread already holds (a resumed or redone episode holds its judgments).
    The graph stays the node's subgraph (LangGraph finds it among the function's nonlocals): its
    checkpoints, interrupts and Studio's view are as they were."""

    async def pipeline_step(state: dict[str, Any], config: RunnableConfig) -> Any:
        try:
            return await graph.ainvoke(state, config)
        except ParentCommand as sent:
            problem = parent_problem(sent.args[0], pipeline)
            if problem is None:
                raise
            raise ContractBroken(RESPONSE, problem, step) from None

    return pipeline_step
