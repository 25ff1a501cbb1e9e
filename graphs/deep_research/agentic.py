"""deep_research, `design = "agentic"`: a supervisor that calls tools, over researchers that call tools.

    write_brief -> supervisor -> [review_plan] -> agent_researcher x N (Send) -> supervisor -> ...
                -> write_report
    agent_researcher (a subgraph):  act -> tools -> act -> ... -> compress

- supervisor: one model turn (role `planner`) offered `conduct_research(topic)`, `think(reflection)`
  and `research_complete()`. Its first turn must conduct research (that call is what plan review
  shows); each `conduct_research` of a turn is a researcher, all of a turn's run in parallel
  (`Send`) and their compressed notes come back as the calls' results. Budgets: researchers per
  turn (`max_researchers`), research rounds (`max_rounds`), supervisor turns (`max_supervisor_turns`).
- agent_researcher: a ReAct loop (role `researcher`) over `search(query)`, `read(url)` and
  `think(reflection)` within `max_tool_calls` tool calls and `max_pages` pages; a URL is fetched
  and noted once per episode, whichever researcher reads it (graphs/deep_research/reads.py). It
  ends by compressing its notes, each tied by code to the source it came from.
- Every model call made for a tool is tagged with the tool's name as its ledger node (`read`'s
  note-taking is under `read`); the turns are under `supervisor` and `act`, compression under
  `compress`. The report is written by the same `write_report` as the planned design: citations
  checked, retried with fewer notes when the prompt overflows the writer's context.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from atelier.agents.citations import SourceRef
from atelier.agents.models.gateway import ModelCallError
from atelier.agents.models.ledger import call_tags
from atelier.agents.models.tool_calls import openai_tool_calls
from atelier.agents.planner import ResearchBrief, checked_queries
from atelier.agents.prompts import Section
from atelier.agents.researcher import take_notes
from atelier.agents.supervisor import (
    SUPERVISOR_TOOLS,
    ToolCall,
    compress_findings,
    researcher_messages,
    researcher_tools,
    supervisor_messages,
    tool_turn,
)
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.deep_research.nodes import PIPELINE, memory_reference, options_of, recall_for
from atelier.graphs.deep_research.reads import EpisodeReads, episode_reads, fetch_claimed
from atelier.graphs.deep_research.state import AgentResearcherState, AgentTask, DeepResearchState, Findings, Note
from atelier.graphs.memory_tool import RECALL_MEMORY, RECALL_MEMORY_TOOL
from atelier.graphs.sources import WebHit, search_web
from atelier.graphs.start import pipeline_context, pipeline_resources

# ----------------------------------------------------------------------------- the supervisor


def recall_allowances(state: DeepResearchState, researchers: int, max_recalls: int) -> list[int]:
    """`max_recalls` is a budget per episode: what the brief and earlier rounds' researchers have not
    used is shared among this round's researchers, evenly (the first ones take the remainder)."""
    used = len(state.get("recalls", [])) + sum(len(f.recalls) for f in state.get("findings", []))
    left = max(0, max_recalls - used)
    return [left // researchers + (1 if i < left % researchers else 0) for i in range(researchers)]


def agent_tasks(state: DeepResearchState, topics: list[str], round_: int, max_recalls: int) -> list[Send]:
    read_before = sorted({s.url for f in state.get("findings", []) for s in f.sources if s.url})
    gold = state.get("gold_context")
    allowances = recall_allowances(state, len(topics), max_recalls) if topics else []
    return [
        Send(
            "agent_researcher",
            AgentTask(
                index=i,
                research_round=round_,
                topic=topic,
                skip_urls=read_before,
                gold_sources=gold.sources if gold is not None else [],
                episode=state.get("episode", ""),
                memory=memory_reference(state),
                recall_allowance=allowances[i],
            ),
        )
        for i, topic in enumerate(topics)
    ]


def _tool_message(call_id: str, name: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


def findings_text(findings: Findings | None) -> str:
    if findings is None or not findings.notes:
        return "The researcher found nothing it could use."
    return "\n".join(f"- {n.text} (source {n.source_id})" for n in findings.notes)


def _research_results(pending: list[dict[str, Any]], done: dict[int, Findings]) -> list[dict[str, Any]]:
    """The researchers' notes as the results of the supervisor's `conduct_research` calls (a topic
    added at plan review has no call: its notes come as a message of their own)."""
    out = []
    for task in pending:
        body = Section(f"Findings on {task['topic']}", findings_text(done.get(task["index"])), untrusted=True).render()
        if task.get("id"):
            out.append(_tool_message(task["id"], "conduct_research", body))
        else:
            out.append({"role": "user", "content": body})
    return out


async def supervisor(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["agent_researcher", "review_plan", "supervisor", "write_report"]]:
    """One supervisor turn: research (in parallel), think, or say the research is complete."""
    options = options_of(runtime)
    brief: ResearchBrief = state["brief"]
    messages = list(
        state.get("supervisor_messages")
        or supervisor_messages(brief.render(), brief.render_form(), options.max_researchers, options.max_rounds)
    )
    round_, depth, turns = state.get("round", 0), state.get("depth", 0), state.get("supervisor_turns", 0)
    pending = state.get("pending_research", [])
    if pending:  # a round just ended: its notes are the results of the calls that started it
        done = {f.index: f for f in state.get("findings", []) if f.round == round_}
        messages += _research_results(pending, done)
        depth += max((f.critical_path_calls for f in done.values()), default=0)
    update: dict[str, Any] = {"pending_research": [], "supervisor_messages": messages, "depth": depth}
    if round_ >= options.max_rounds or turns >= options.max_supervisor_turns:  # the budget ends the research
        return Command(goto="write_report", update=update)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    try:
        turn = await tool_turn(
            gateway, "planner", messages, SUPERVISOR_TOOLS, forced="conduct_research" if turns == 0 else None
        )
    except ModelCallError as exc:
        if turns:  # the report is written from the rounds done
            fell_back = degradation("step_fallback", "supervisor", f"report written after round {round_}: {exc}")
            return Command(goto="write_report", update={**update, "degraded": _more(state, fell_back)})
        turn_calls = [ToolCall(name="conduct_research", arguments={"topic": brief.question})]
        update["degraded"] = _more(
            state, degradation("step_fallback", "supervisor", f"one researcher on the whole question: {exc}")
        )
    else:
        turn_calls = turn.tool_calls
    update.update(supervisor_turns=turns + 1, depth=depth + 1)
    calls = openai_tool_calls(
        {"tool_calls": [c.model_dump() for c in turn_calls]},
        f"supervisor:{turns}",  # no episode id: a replayed prompt is the same
    )
    messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    complete = any(c.name == "research_complete" for c in turn_calls)
    research: list[tuple[str, str]] = []
    problems: list[Degradation] = []
    for call, sent in zip(turn_calls, calls):
        if call.name == "conduct_research" and not complete and len(research) < options.max_researchers:
            topic = " ".join(str(call.arguments.get("topic", "")).split())
            if not topic:
                problems.append(
                    degradation("empty_answer", "supervisor", "conduct_research with no topic: the question instead")
                )
                topic = brief.question
            research.append((sent["id"], topic))
            continue
        said = {
            "think": "Reflection noted.",
            "research_complete": "The report will be written from the notes gathered.",
            "conduct_research": "Not run: the research is complete."
            if complete
            else f"Not run: at most {options.max_researchers} researchers per turn.",
        }.get(call.name, f"Unknown tool {call.name}.")
        messages.append(_tool_message(sent["id"], call.name, said))
    if problems:
        update["degraded"] = _more({**state, **update}, *problems)
    if complete or not turn_calls:
        return Command(goto="write_report", update=update)
    if not research:  # it only thought: its next turn
        return Command(goto="supervisor", update=update)
    topics = [topic for _, topic in research]
    update["pending_research"] = [{"id": cid, "index": i, "topic": t} for i, (cid, t) in enumerate(research)]
    update["round"] = round_ + 1
    if options.review_plan and turns == 0:
        update["plan"] = [{"title": t, "why_for_user": "", "queries": [t]} for t in topics]
        return Command(goto="review_plan", update=update)
    return Command(goto=agent_tasks(state, topics, round_ + 1, options.max_recalls), update=update)


def _more(state: Any, *items: Degradation) -> list[Degradation]:
    return [*state.get("degraded", []), *items]


# ----------------------------------------------------------------------------- one researcher


def _reads(state: AgentResearcherState, runtime: Runtime[EpisodeContext]) -> EpisodeReads:
    episode = state.get("episode")
    return episode_reads(pipeline_context(runtime, PIPELINE), episode) if episode else EpisodeReads()


async def act(state: AgentResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["tools", "compress"]]:
    """The researcher's next turn: the tools it calls, or nothing (it is done)."""
    options = options_of(runtime)
    if state["gold_sources"]:  # gold_context: the gold information is read, no web
        return Command(goto="tools", update={"calls": [{"id": "gold", "name": "read_gold", "arguments": {}}]})
    messages = list(
        state.get("messages") or researcher_messages(state["topic"], options.max_tool_calls, options.recall_tool)
    )
    steps = state.get("steps", 0)
    if state.get("tool_calls", 0) >= options.max_tool_calls or steps > options.max_tool_calls:
        return Command(goto="compress", update={"messages": messages})
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    read = {s.url for s in state.get("sources", [])}
    unread = [h.url for h in state.get("hits", []) if h.url not in read][: options.results_per_query * 4]
    # it searches first, and reads before it may stop: a weak model's turns still make progress
    forced = "search" if not steps else "read" if unread and not read else None
    try:
        recall = (
            [RECALL_MEMORY_TOOL] if options.recall_tool and len(state.get("recalls", [])) < _allowance(state) else []
        )
        turn = await tool_turn(gateway, "researcher", messages, researcher_tools(unread, recall), forced=forced)
    except ModelCallError as exc:  # the notes taken stand
        stopped = degradation("step_fallback", "act", f"researcher stopped at {state['topic']!r}: {exc}")
        return Command(goto="compress", update={"messages": messages, "degraded": _more(state, stopped)})
    calls = openai_tool_calls(
        {"tool_calls": [c.model_dump() for c in turn.tool_calls]},
        f"researcher:{state['research_round']}:{state['index']}:{steps}",
    )
    messages.append({"role": "assistant", "content": turn.content, "tool_calls": calls})
    update = {"messages": messages, "steps": steps + 1, "chain_calls": state.get("chain_calls", 0) + 1}
    if not calls:
        return Command(goto="compress", update=update)
    pending = [{"id": c["id"], "name": t.name, "arguments": t.arguments} for c, t in zip(calls, turn.tool_calls)]
    return Command(goto="tools", update={**update, "calls": pending})


def _allowance(state: AgentResearcherState) -> int:
    """The recall_memory calls this researcher may make (a task from before allowances: none)."""
    return int(state.get("recall_allowance", 0))


@dataclass
class _Outcome:
    """What one tool call did: its result for the model, and what it adds to the researcher's state."""

    text: str
    hits: list[WebHit] = field(default_factory=list)
    sources: list[SourceRef] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)
    fetches: int = 0
    reused: int = 0
    recalls: list[dict[str, Any]] = field(default_factory=list)
    called_model: bool = False
    degraded: list[Degradation] = field(default_factory=list)


async def tools(state: AgentResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["act", "compress"]]:
    """Run the turn's tool calls in parallel, within the budgets; each call's model calls are tagged
    with the tool's name."""
    options = options_of(runtime)
    resources = pipeline_resources(runtime, PIPELINE)
    reads = _reads(state, runtime)
    calls: list[dict[str, Any]] = state.get("calls", [])
    hits = {h.url: h for h in state.get("hits", [])}
    read_ids = {s.id for s in state.get("sources", [])}
    read_urls = {s.url for s in state.get("sources", []) if s.url}
    skip = set(state["skip_urls"]) | read_urls
    searched = list(state.get("searched", []))
    budget = options.max_tool_calls - state.get("tool_calls", 0)
    pages = options.max_pages - len(state.get("sources", []))

    async def note(source: SourceRef) -> tuple[list[Note], list[Degradation]]:
        text = resources.sources.get(source.sha256)[: options.page_chars]
        try:
            taken = await take_notes(
                resources.gateway, state["topic"], "", source.title, text, options.notes_per_source
            )
        except ModelCallError as exc:
            return [], [degradation("step_fallback", "read", f"source left out: notes from {source.url}: {exc}")]
        return [Note(source_id=source.id, text=t) for t in taken], []

    async def search(query: str) -> _Outcome:
        kept, problems = checked_queries([query], state["topic"], "search", seen=searched)
        searched.extend(kept)  # before the first await: the turn's other searches see it
        found, failures = await search_web(
            await resources.open_web(), kept, options.results_per_query, options.results_per_query, sorted(skip)
        )
        text = "\n".join(f"- {h.title or h.url}: {h.url}" for h in found) or "No results."
        return _Outcome(text, hits=found, searched=kept, degraded=[*problems, *failures])

    async def read(url: str) -> _Outcome:
        nonlocal pages
        hit = hits.get(url)
        if hit is None:
            return _Outcome(
                f"Not read: {url} is not among your search results; search first.",
                degraded=[degradation("step_fallback", "read", f"refused {url!r}: not a search result")],
            )
        if url in read_urls:
            return _Outcome(f"Already read: {url}.")
        if pages <= 0:
            return _Outcome(f"Not read: the budget of {options.max_pages} pages is spent.")
        pages -= 1
        read_urls.add(url)
        while not reads.claim(url):
            got = await reads.wait(url)
            if got is None:
                continue  # claimed in an earlier process: read here
            source, notes = got
            if source is None or source.id in read_ids:
                return _Outcome(f"Not read: {url} could not be read." if source is None else f"Already read: {url}.")
            read_ids.add(source.id)
            return _Outcome(_notes_text(source, notes), sources=[source], notes=notes, reused=1)
        fetched, _, failures = await fetch_claimed(await resources.open_web(), resources.sources, reads, [hit])
        if not fetched:
            return _Outcome(f"Not read: {url} could not be read.", fetches=1, degraded=failures)
        source = fetched[0]
        notes, problems = await note(source)
        reads.publish(url, source, notes)
        read_ids.add(source.id)
        return _Outcome(
            _notes_text(source, notes), sources=[source], notes=notes, fetches=1, called_model=True, degraded=problems
        )

    recalls_left = _allowance(state) - len(state.get("recalls", []))

    async def recall(query: str) -> _Outcome:
        nonlocal recalls_left
        if not options.recall_tool or recalls_left <= 0:
            return _Outcome(f"Not run: {RECALL_MEMORY} is not available now.")
        recalls_left -= 1
        got = await recall_for(runtime, state.get("memory", {}), " ".join(query.split()))
        degraded = [d.model_copy(update={"step": RECALL_MEMORY}) for d in got.degraded]
        record = got.model_dump(include={"query", "event_ids", "text"})
        return _Outcome(got.text or "Memory holds nothing about that.", recalls=[record], degraded=degraded)

    async def read_gold() -> _Outcome:
        gold = state["gold_sources"]
        taken = await asyncio.gather(*(note(s) for s in gold))
        return _Outcome(
            "",
            sources=list(gold),
            notes=[n for notes, _ in taken for n in notes],
            called_model=True,
            degraded=[d for _, problems in taken for d in problems],
        )

    async def run(call: dict[str, Any], within: bool) -> _Outcome:
        name, arguments = call["name"], call.get("arguments") or {}
        if not within:
            return _Outcome(f"Not run: the budget of {options.max_tool_calls} tool calls is spent.")
        with call_tags(node=name):
            if name == "search":
                return await search(str(arguments.get("query", "")))
            if name == "read":
                return await read(str(arguments.get("url", "")).strip())
            if name == "read_gold":
                return await read_gold()
            if name == "think":
                return _Outcome("Reflection noted.")
            if name == RECALL_MEMORY:
                return await recall(str(arguments.get("query", "")))
        return _Outcome(f"Unknown tool {name}.")

    outcomes = await asyncio.gather(*(run(call, i < budget) for i, call in enumerate(calls)))
    messages = list(state.get("messages", [])) + [
        _tool_message(call["id"], call["name"], outcome.text) for call, outcome in zip(calls, outcomes)
    ]
    new_hits = {h.url: h for o in outcomes for h in o.hits if h.url not in hits}
    update = {
        "messages": messages,
        "calls": [],
        "hits": [*state.get("hits", []), *new_hits.values()],
        "sources": [*state.get("sources", []), *(s for o in outcomes for s in o.sources)],
        "notes": [*state.get("notes", []), *(n for o in outcomes for n in o.notes)],
        "searched": searched,
        "searches": state.get("searches", 0) + sum(len(o.searched) for o in outcomes),
        "fetches": state.get("fetches", 0) + sum(o.fetches for o in outcomes),
        "reused": state.get("reused", 0) + sum(o.reused for o in outcomes),
        "recalls": [*state.get("recalls", []), *(r for o in outcomes for r in o.recalls)],
        "tool_calls": state.get("tool_calls", 0) + min(len(calls), max(0, budget)),
        "chain_calls": state.get("chain_calls", 0) + (1 if any(o.called_model for o in outcomes) else 0),
        "degraded": _more(state, *(d for o in outcomes for d in o.degraded)),
    }
    return Command(goto="compress" if state["gold_sources"] else "act", update=update)


def _notes_text(source: SourceRef, notes: list[Note]) -> str:
    head = f"Read {source.url} (source {source.id}): {source.title}"
    return head + ("\n" + "\n".join(f"- {n.text}" for n in notes) if notes else "\nNo notes: it does not help.")


async def compress(state: AgentResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["__end__"]]:
    """The notes compressed, each tied by code to the source it came from (the schema offers only the
    numbers of the sources read); without notes, the researcher says it found nothing."""
    notes = state.get("notes", [])
    sources = [s for s in state.get("sources", []) if any(n.source_id == s.id for n in notes)]
    depth = state.get("chain_calls", 0)
    degraded = list(state.get("degraded", []))
    if len(notes) > 1 and not state["gold_sources"]:
        gateway = pipeline_resources(runtime, PIPELINE).gateway
        grouped = [(s.title or s.url or s.id, [n.text for n in notes if n.source_id == s.id]) for s in sources]
        budget = min(20, max(3, len(notes) // 2 + 1))
        try:
            compressed = await compress_findings(gateway, state["topic"], grouped, budget)
        except ModelCallError as exc:  # the notes as taken stand
            degraded.append(degradation("step_fallback", "compress", f"notes kept as taken: {exc}"))
        else:
            depth += 1
            tied = [Note(source_id=sources[n - 1].id, text=t) for n, t in compressed if 1 <= n <= len(sources)]
            if tied:
                notes = list({(n.source_id, n.text): n for n in tied}.values())
            else:
                degraded.append(degradation("empty_answer", "compress", "no note came back: the notes as taken stand"))
    if not notes:
        degraded.append(
            degradation(
                "no_findings",
                "researcher",
                f"{state['topic']!r}: no notes from {len(state.get('sources', []))} sources read",
            )
        )
    findings = Findings(
        index=state["index"],
        round=state["research_round"],
        topic=state["topic"],
        sources=state.get("sources", []),
        notes=notes,
        searches=state.get("searches", 0),
        fetches=state.get("fetches", 0),
        steps=state.get("steps", 0),
        covered=False,
        critical_path_calls=depth,
        reused=state.get("reused", 0),
        recalls=state.get("recalls", []),
        degraded=degraded,
    )
    return Command(goto=END, update={"findings": [findings]})  # type: ignore[arg-type]  # langgraph types END as str, not Literal["__end__"]
