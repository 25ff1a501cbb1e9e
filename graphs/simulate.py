"""`simulate`: the simulated user and a system under test talk for several turns (iKAT-style
conversational search); and how runs answer a system's questions with the simulated user.

The conversation subgraph takes the episode's place for the system when a system has
`conversation = { max_turns = N }`:

    open -> system -> simulated_user -> (recall -> system -> simulated_user)* -> close

The user opens with the case's query; after each response the simulated user (role `user_sim`,
grounded on the persona and the hidden gold need) follows up or says its stop token; the turn
budget bounds the loop. Each turn the system sees only a `CaseView` whose query is the user's
latest message with the conversation so far as `previous_turns`, and a fresh recall from its
memory. The transcript, turn by turn, is the response the judges see.

`run_with_simulated_user` drives an episode in a run: when the system stops at a clarify
`interrupt(ClarifyRequest)` or a plan review (`PlanReviewRequest`), the simulated user answers it
from the full case and the episode resumes with the typed answer, its calls tagged with the
interrupting node.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from langgraph.graph import StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command

from atelier.agents.clarify import ClarifyRequest
from atelier.agents.models.ledger import call_tags
from atelier.agents.response import Citation, SystemResponse
from atelier.agents.user_sim import GoldGuard, answer_clarification, next_user_turn
from atelier.agents.user_sim.conversation import ConversationEnd
from atelier.agents.user_sim.grounding import STOP_TOKEN
from atelier.agents.user_sim.plan_review import review_plan_as_user
from atelier.benchmarks.case import Case, ConversationTurn, Query
from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.context import ConversationOptions, EpisodeContext
from atelier.graphs.contract import PipelineOutputError, checked_response, output_problem, sending_only_its_response
from atelier.graphs.deep_research.review import PlanReviewRequest
from atelier.graphs.inputs import PipelineInput, PipelineOutput, case_from_input, case_view, memory_view
from atelier.graphs.memory import no_upfront_context, recall_context
from atelier.graphs.memory_tool import reads_memory_upfront
from atelier.graphs.pipelines import PIPELINES, node_name
from atelier.graphs.resources import resources_for

RequestT = TypeVar("RequestT", ClarifyRequest, PlanReviewRequest)
MAX_INTERRUPTS = 8  # clarify and plan review rounds one episode may ask for


def conversation_branch(pipeline: str) -> str:
    """The episode node where `pipeline` talks with the simulated user."""
    return f"{node_name(pipeline)}_conversation"


class ConversationState(PipelineInput, PipelineOutput, total=False):
    opening: list[ConversationTurn]  # turns the case itself came with (iKAT), before the simulation
    turns: list[ConversationTurn]  # simulated turns so far: the user's message and the system's response
    responses: list[SystemResponse]  # per simulated turn, the system's citations and meta (its text is in `turns`)
    ended: ConversationEnd
    redacted: int  # gold spans the guard cut from the user's messages


def _context(runtime: Runtime[EpisodeContext]) -> EpisodeContext:
    return runtime.context or EpisodeContext()


def _options(runtime: Runtime[EpisodeContext]) -> ConversationOptions:
    return _context(runtime).system.conversation or ConversationOptions()


def open_conversation(state: ConversationState, runtime: Runtime[EpisodeContext]) -> Command[Literal["system"]]:
    """The user's first message is the case's query, as the system already sees it."""
    opening = list(case_view(state, _context(runtime)).query.previous_turns)
    return Command(goto="system", update={"opening": opening, "turns": [], "responses": [], "redacted": 0})


async def simulated_user(
    state: ConversationState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["recall", "close"]]:
    """Record the turn just answered, then let the user follow up or stop (within the turn budget)."""
    context = _context(runtime)
    answered = checked_response(state, context.system.pipeline, step="system")  # each turn, as a plain episode's
    asked = case_view(state, context).query
    turns = [*state["turns"], ConversationTurn(utterance=asked.text, response=answered.text)]
    responses = [*state["responses"], answered.model_copy(update={"text": ""})]
    update: dict[str, Any] = {"turns": turns, "responses": responses}
    if len(turns) >= _options(runtime).max_turns:
        return Command(goto="close", update={**update, "ended": "turn_budget"})
    case = case_from_input(state, context)
    so_far = [*state["opening"], *turns]
    reply = await next_user_turn(resources_for(context).gateway, case, so_far, guard=GoldGuard(case))
    update["redacted"] = state["redacted"] + reply.redacted
    if reply.ended is not None:
        return Command(goto="close", update={**update, "ended": reply.ended})
    query = Query(text=reply.text, previous_turns=so_far, language=asked.language)
    return Command(goto="recall", update={**update, "query": query})


async def recall(state: ConversationState, runtime: Runtime[EpisodeContext]) -> Command[Literal["system"]]:
    """The system's memory, asked again with the user's new message and the conversation so far."""
    context = _context(runtime)
    # the last turn's response goes: a turn whose pipeline returns none is not answered by the one before
    if not reads_memory_upfront(context):  # memory_access = "tool": the system recalls through its tool
        return Command(goto="system", update={"user_context": no_upfront_context(context), "response": None})
    user_context = await recall_context(resources_for(context), case_view(state, context), memory_view(state, context))
    return Command(goto="system", update={"user_context": user_context, "response": None})


def transcript(
    turns: list[ConversationTurn], responses: list[SystemResponse], ended: ConversationEnd
) -> SystemResponse:
    """The conversation as one response: each turn's user message and system response, in order;
    citations pooled (first occurrence of each source), and every turn's degraded steps; per-turn
    detail in `meta`."""
    blocks = [f"## Turn {i}\n\n**User:** {t.utterance}\n\n**Assistant:** {t.response}" for i, t in enumerate(turns, 1)]
    if ended in ("satisfied", "gave_up"):
        blocks.append(f"**User:** {STOP_TOKEN}")
    citations: dict[str, Citation] = {}
    for response in responses:
        for citation in response.citations:
            citations.setdefault(citation.source_id, citation)
    meta = {
        "conversation": {
            "turns": [{"user": t.utterance, "assistant": t.response, "meta": r.meta} for t, r in zip(turns, responses)],
            "user_turns": len(turns),
            "ended": ended,
        }
    }
    return SystemResponse(
        text="\n\n".join(blocks),
        citations=list(citations.values()),
        meta=meta,
        degraded=[d for r in responses for d in r.degraded],
    )


def close(state: ConversationState) -> PipelineOutput:
    response = transcript(state["turns"], state["responses"], state["ended"])
    response.meta["conversation"]["redacted_gold_spans"] = state["redacted"]
    return {"response": response}


def build_conversation_graph(pipeline: str = "direct"):
    graph = StateGraph(
        ConversationState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("open", open_conversation)
    # held, as in a plain episode, to return and send the conversation nothing but its response
    # (its output schema, Command.PARENT)
    system = PIPELINES.get(pipeline).build()
    problem = output_problem(system, pipeline, ConversationState.__annotations__)
    if problem is not None:
        raise PipelineOutputError(problem)
    graph.add_node("system", sending_only_its_response(system, pipeline, "system"))
    graph.add_node("simulated_user", simulated_user)
    graph.add_node("recall", recall)
    graph.add_node("close", close)
    graph.set_entry_point("open")
    graph.add_edge("system", "simulated_user")
    graph.set_finish_point("close")
    return graph.compile(name=conversation_branch(pipeline))


# --------------------------------------------------------------------------- answering interrupts in runs


def _interrupting_node(tasks: Any, interrupt_id: str) -> str | None:
    """The innermost graph node that raised the interrupt (walks subgraph snapshots)."""
    for task in tasks:
        if any(i.id == interrupt_id for i in task.interrupts):
            inner = getattr(task.state, "tasks", None)  # a subgraph's snapshot, when the task is one
            return (_interrupting_node(inner, interrupt_id) if inner else None) or task.name
    return None


def _as_request(model: type[RequestT], value: Any) -> RequestT | None:
    """An interrupt's value as `model` (it may travel as plain data), or None if it is not one."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValueError:
        return None


async def _simulated_answer(value: Any, gateway, case: Case, context: EpisodeContext, node: str) -> Any:
    """The simulated user's resume value for one interrupt: clarify answers or a plan review."""
    request = _as_request(ClarifyRequest, value)
    review = _as_request(PlanReviewRequest, value) if request is None else None
    if request is None and review is None:
        raise RuntimeError(f"the episode stopped at an interrupt the simulated user cannot answer: {value!r}")
    if context.clarify_answerer != "simulated_user":
        asked = (
            f"asked the user {len(request.questions)} clarifying question(s)"
            if request is not None
            else "asked the user to review its research plan"
        )
        raise ConfigError(
            f"system {context.system.name!r} {asked} on case {case.id!r}, but this run's simulated user does not "
            "answer the system (set [user_sim] clarify = true)"
        )
    with call_tags(node=node):
        if request is not None:
            return (await answer_clarification(gateway, case, request)).answers
        assert review is not None
        titles = [t.title for t in review.subtopics]
        verdict = await review_plan_as_user(gateway, case, titles, review.max_subtopics, problem=review.problem)
        return verdict.resume_value()


async def run_with_simulated_user(graph, case: Case, config: dict[str, Any], context: EpisodeContext) -> dict[str, Any]:
    """Run (or continue) one episode of a run; answer each clarify or plan review interrupt with the
    simulated user (`clarify_answerer = "simulated_user"`) and resume. A system that asks when no
    simulated user answers is an error naming it."""
    # interrupted earlier: continue from the checkpoint; else start from the case's reference (a
    # thread with no checkpoint at all, the usual case, is told by one lookup: no state snapshot)
    saved = graph.checkpointer is None or await graph.checkpointer.aget_tuple(config) is not None
    resuming = saved and bool((await graph.aget_state(config)).next)
    payload: Any = None if resuming else {"benchmark": case.benchmark, "case_id": case.id}
    gateway = resources_for(context).gateway
    for _ in range(MAX_INTERRUPTS + 1):
        out = await graph.ainvoke(payload, config, context=context)
        pending = out.get("__interrupt__") or []
        if not pending:
            return out
        tasks = (await graph.aget_state(config, subgraphs=True)).tasks
        resume = {}
        for pending_interrupt in pending:
            node = _interrupting_node(tasks, pending_interrupt.id) or "interrupt"
            resume[pending_interrupt.id] = await _simulated_answer(
                pending_interrupt.value, gateway, case, context, node
            )
        payload = Command(resume=resume)
    raise RuntimeError(f"the episode asked the user more than {MAX_INTERRUPTS} times (clarifications, plan reviews)")
