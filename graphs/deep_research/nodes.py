"""deep_research's nodes. Each returns a typed `Command`, so Studio draws every edge.

Top graph:   clarify -> [ask_user] -> write_brief -> plan -> researcher x N (Send)
             -> reflect -> (researcher x M (Send) -> reflect)* -> write_report
Researcher:  search -> read -> take_notes -> assess -> (search | end)

Budgets (DeepResearchOptions) bound every loop and fan-out: questions, researchers per round,
rounds, queries per sub-topic, pages and tool calls (searches + fetches) per researcher, researcher
steps, notes per source, sources in the report, report tokens.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Literal

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import Field

from atelier.agents.answerer import recall_before_answering
from atelier.agents.citations import SourceRef
from atelier.agents.clarifier import decide_clarification
from atelier.agents.clarify import ClarifyAnswers, ClarifyRequest
from atelier.agents.models.gateway import ModelCallError
from atelier.agents.planner import ResearchBrief, Subtopic, checked_queries, plan_research, whole_question
from atelier.agents.planner import reflect as reflect_on_gaps
from atelier.agents.planner import write_brief as brief_for_user
from atelier.agents.researcher import assess_coverage, take_notes
from atelier.agents.response import SystemResponse
from atelier.agents.writer import write_report as write_cited_report
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.graphs.context import EpisodeContext
from atelier.graphs.deep_research.reads import EpisodeReads, episode_reads, fetch_claimed, forget_episode
from atelier.graphs.deep_research.state import (
    Clarification,
    DeepResearchState,
    Findings,
    Note,
    ResearcherState,
    ResearchTask,
)
from atelier.graphs.inputs import PipelineOutput, case_view, memory_view
from atelier.graphs.interrupts import ask_until_usable
from atelier.graphs.memory_tool import (
    RECALL_MEMORY_TOOL,
    MemoryAccessOptions,
    Recall,
    recall_degradations,
    recall_memory,
    recalled_context,
    recalls_meta,
)
from atelier.graphs.pipelines import GoldContextOptions
from atelier.graphs.sources import WebHit, citation_degradations, search_web
from atelier.graphs.start import (
    meta_of,
    pipeline_context,
    pipeline_options_of,
    pipeline_resources,
    start_inputs,
    view_of,
)

PIPELINE = "deep_research"


class DeepResearchOptions(GoldContextOptions, MemoryAccessOptions):
    design: Literal["plan", "agentic"] = Field(
        default="plan",
        description="plan: a fixed plan of sub-topics, researchers that search, read, take notes and assess, a "
        "reflect loop. agentic: a supervisor that calls tools (conduct_research, think, research_complete) over "
        "researchers that choose theirs (search, read, think) and compress their notes (graphs/deep_research/agentic.py).",
    )
    review_plan: bool = Field(
        default=False,
        description="Stop after the plan (or the supervisor's first research call) so a person (Studio) or, in a "
        "run with [user_sim] clarify = true, the simulated user accepts it or gives an edited plan; a run with no "
        "one to answer researches the plan and records the review as skipped (graphs/deep_research/review.py).",
    )
    clarify: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="auto: the clarifier decides; always: ask at least one question; never: skip. "
        "A query with previous turns (a conversation's follow-up, an iKAT turn) "
        "is not clarified.",
    )
    max_questions: int = Field(default=3, ge=1, le=5, description="Clarifying questions at most.")
    max_researchers: int = Field(default=3, ge=1, le=8, description="Parallel researchers per round.")
    max_rounds: int = Field(default=2, ge=1, le=5, description="Research rounds (the first, then gap-filling ones).")
    queries_per_topic: int = Field(default=2, ge=1, le=5, description="Search queries per sub-topic and step.")
    results_per_query: int = Field(default=5, ge=1, le=20, description="Results asked of each search.")
    max_pages: int = Field(default=3, ge=1, le=20, description="Sources one researcher reads at most.")
    max_tool_calls: int = Field(default=8, ge=1, le=50, description="Searches + fetches one researcher makes at most.")
    max_steps: int = Field(default=2, ge=1, le=5, description="search -> read -> notes -> assess loops per researcher.")
    notes_per_source: int = Field(default=4, ge=1, le=20, description="Notes taken from one source at most.")
    page_chars: int = Field(default=6000, ge=500, le=50_000, description="Characters of a source the note-taker reads.")
    report_sources: int = Field(default=20, ge=1, le=100, description="Sources the writer is shown at most.")
    report_tokens: int = Field(default=2000, ge=100, le=32_000, description="Most tokens the report may take.")
    max_supervisor_turns: int = Field(
        default=4, ge=1, le=20, description="design = agentic: supervisor turns at most (research, think or complete)."
    )

    def output_tokens(self) -> dict[str, int]:
        return {"writer": self.report_tokens}


def options_of(runtime: Runtime[EpisodeContext]) -> DeepResearchOptions:
    return pipeline_options_of(runtime, PIPELINE, DeepResearchOptions)


_options = options_of


def _upfront(state: DeepResearchState, options: DeepResearchOptions) -> str:
    """The memory's upfront context (none with memory_access = tool, even when the pipeline runs alone)."""
    return state["user_context"].text if options.recalls_upfront else ""


def _context_text(state: DeepResearchState, options: DeepResearchOptions) -> str:
    """What the system knows about the user: the upfront context, then what the brief step recalled
    with `recall_memory` (memory_access = tool | both)."""
    recalls = [Recall.model_validate(r) for r in state.get("recalls", [])]
    return recalled_context(_upfront(state, options), recalls)


def memory_reference(state: DeepResearchState) -> dict[str, Any]:
    """What a researcher needs to call `recall_memory`: the case by reference (small), not its history."""
    keys = ("benchmark", "case_id", "query", "profile_case_id") if state.get("case_id") else ("view", "query")
    return {key: state[key] for key in keys if state.get(key) is not None}  # type: ignore[literal-required]


async def recall_for(runtime: Runtime[EpisodeContext], reference: dict[str, Any], query: str) -> Recall:
    """One `recall_memory` call for the episode's user (its own ledger line, under node recall_memory)."""
    context = pipeline_context(runtime, PIPELINE)
    return await recall_memory(
        pipeline_resources(runtime, PIPELINE), case_view(reference, context), query, memory_view(reference, context)
    )


# ----------------------------------------------------------------------------- top graph


async def clarify(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["ask_user", "write_brief"]]:
    """Decide what to ask the user. Skipped (and recorded) when the run has no one to answer."""
    state, update = await start_inputs(state, runtime, PIPELINE)
    update["episode"] = state.get("episode") or uuid.uuid4().hex[:16]
    options = _options(runtime)
    if options.clarify == "never":
        return Command(goto="write_brief", update={**update, "clarification": Clarification(status="off")})
    if view_of(state, runtime, PIPELINE).query.previous_turns:
        follow_up = Clarification(
            status="not_needed", reason="a follow-up turn: the conversation so far is the user's clarification"
        )
        return Command(goto="write_brief", update={**update, "clarification": follow_up})
    if pipeline_context(runtime, PIPELINE).clarify_answerer == "none":
        skipped = Clarification(
            status="skipped",
            reason="no one to answer clarifying questions in this run (no simulated user is configured)",
        )
        return Command(goto="write_brief", update={**update, "clarification": skipped})
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    query = view_of(state, runtime, PIPELINE).query
    update["depth"] = 1
    try:
        questions = await decide_clarification(
            gateway, query, _context_text(state, options), options.max_questions, always=options.clarify == "always"
        )
    except ModelCallError as exc:  # research goes on without asking
        return Command(
            goto="write_brief",
            update={
                **update,
                "clarification": Clarification(status="failed", reason=str(exc)),
                "degraded": _more(state, degradation("step_fallback", "clarify", f"researched without asking: {exc}")),
            },
        )
    if not questions:
        return Command(goto="write_brief", update={**update, "clarification": Clarification(status="not_needed")})
    asked = Clarification(status="answered", questions=questions)
    return Command(goto="ask_user", update={**update, "clarification": asked})


def _parse_answers(value: Any) -> ClarifyAnswers:
    if isinstance(value, ClarifyAnswers):
        return value
    if isinstance(value, (list, tuple)):
        value = {"answers": list(value)}
    elif isinstance(value, str):
        value = {"answers": [value]}
    return ClarifyAnswers.model_validate(value)


def ask_user(state: DeepResearchState) -> Command[Literal["write_brief"]]:
    """Interrupt with the questions; the resume value is the user's `ClarifyAnswers`. One that cannot
    be used (another shape, more answers than questions) is answered by asking again."""
    asked = state["clarification"]
    request = ClarifyRequest(questions=asked.questions)
    pairs = ask_until_usable(
        request,
        lambda value: _parse_answers(value).aligned(request),
        '{"answers": ["...", ...]}, one answer per question',
    )
    answered = asked.model_copy(update={"answers": [a for _, a in pairs]})
    return Command(goto="write_brief", update={"clarification": answered})


async def write_brief(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["plan", "supervisor"]]:
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    options = _options(runtime)
    clarification = state.get("clarification")
    query = view_of(state, runtime, PIPELINE).query
    update: dict[str, Any] = {"depth": state.get("depth", 0) + 1}
    problems: list[Degradation] = []
    if options.recall_tool:  # the brief's author looks up what it wants to know about the user
        reference, recalls = memory_reference(state), {}

        async def served(text: str) -> str:
            recalls[text] = await recall_for(runtime, reference, text)
            return recalls[text].text

        looked = await recall_before_answering(
            gateway,
            query,
            _upfront(state, options),
            RECALL_MEMORY_TOOL,
            served,
            options.max_recalls,
            role="planner",
            step="write_brief",
        )
        kept = [recalls[lookup.query] for lookup in looked.lookups]
        state = {**state, "recalls": [r.model_dump() for r in kept]}
        update.update(recalls=state["recalls"], depth=update["depth"] + looked.turns)
        problems = [
            *looked.degraded,
            *(d.model_copy(update={"step": "recall_memory"}) for r in kept for d in r.degraded),
        ]
        if problems:
            update["degraded"] = _more(state, *problems)
    try:
        update["brief"] = await brief_for_user(
            gateway, query, _context_text(state, options), clarification.pairs() if clarification else []
        )
    except ModelCallError as exc:  # research the question as asked, and say so
        update["brief"] = ResearchBrief.plain(query)
        update["degraded"] = _more(
            state, *problems, degradation("step_fallback", "write_brief", f"researching the question as asked: {exc}")
        )
    return Command(goto="supervisor" if _options(runtime).design == "agentic" else "plan", update=update)


def research_tasks(state: DeepResearchState, subtopics: list[Subtopic], round_: int) -> list[Send]:
    read_before = sorted({s.url for f in state.get("findings", []) for s in f.sources if s.url})
    gold = state.get("gold_context")
    return [
        Send(
            "researcher",
            ResearchTask(
                index=i,
                research_round=round_,
                topic=t.title,
                focus=t.why_for_user,
                queries=t.queries,
                skip_urls=read_before,
                gold_sources=gold.sources if gold is not None else [],
                episode=state.get("episode", ""),
            ),
        )
        for i, t in enumerate(subtopics)
    ]


async def plan(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["researcher", "review_plan"]]:
    options = _options(runtime)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    update: dict[str, Any] = {"round": 1, "depth": state.get("depth", 0) + 1}
    try:
        subtopics = await plan_research(gateway, state["brief"], options.max_researchers, options.queries_per_topic)
    except ModelCallError as exc:  # one researcher on the whole question, and say so
        subtopics = whole_question(state["brief"])
        update["degraded"] = _more(
            state, degradation("step_fallback", "plan", f"one sub-topic, the whole question: {exc}")
        )
    if options.review_plan:  # a person (or the simulated user) sees the plan first
        plan_data = [t.model_dump() for t in subtopics]
        return Command(goto="review_plan", update={**update, "plan": plan_data})
    return Command(goto=research_tasks(state, subtopics, 1), update=update)


def _more(state: DeepResearchState | ResearcherState, *items: Degradation) -> list[Degradation]:
    """The state's degradations with `items` added (a node's update replaces the list)."""
    return [*state.get("degraded", []), *items]


def _sorted_findings(state: DeepResearchState) -> list[Findings]:
    return sorted(state.get("findings", []), key=lambda f: (f.round, f.index))


def _findings_digest(findings: list[Findings]) -> str:
    lines = []
    for f in findings:
        lines.append(f"## {f.topic} ({len(f.notes)} notes from {len(f.sources)} sources)")
        lines += [f"- {n.text}" for n in f.notes]
    return "\n".join(lines)


async def reflect(
    state: DeepResearchState, runtime: Runtime[EpisodeContext]
) -> Command[Literal["researcher", "write_report"]]:
    """After a round: add its longest researcher chain to the critical path; fill gaps if rounds are left."""
    options = _options(runtime)
    round_ = state["round"]
    this_round = [f for f in state.get("findings", []) if f.round == round_]
    depth = state.get("depth", 0) + max((f.critical_path_calls for f in this_round), default=0)
    if round_ >= options.max_rounds:
        return Command(goto="write_report", update={"depth": depth})
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    try:
        gaps = await reflect_on_gaps(
            gateway,
            state["brief"],
            _findings_digest(_sorted_findings(state)),
            options.max_researchers,
            options.queries_per_topic,
        )
    except ModelCallError as exc:  # the report is written from the rounds done
        fell_back = degradation("step_fallback", "reflect", f"report written after round {round_}: {exc}")
        return Command(goto="write_report", update={"depth": depth + 1, "degraded": _more(state, fell_back)})
    depth += 1
    if not gaps:
        return Command(goto="write_report", update={"depth": depth})
    return Command(goto=research_tasks(state, gaps, round_ + 1), update={"round": round_ + 1, "depth": depth})


def context_overflowed(exc: ModelCallError) -> bool:
    """Whether a call failed because its prompt was longer than the model's context."""
    import litellm

    if isinstance(exc.__cause__, litellm.ContextWindowExceededError):
        return True
    said = (exc.server_message or "").lower()
    return any(words in said for words in ("context length", "context window", "maximum context", "context size"))


def trimmed_notes(notes: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Half of the notes (rounded down), taken evenly across their sources, in their order."""
    rank: dict[int, int] = {}
    ranked = []
    for position, (number, _) in enumerate(notes):
        rank[number] = rank.get(number, 0) + 1
        ranked.append((rank[number], position))
    kept = sorted(position for _, position in sorted(ranked)[: len(notes) // 2])
    return [notes[position] for position in kept]


def _report_material(
    findings: list[Findings], limit: int
) -> tuple[list[SourceRef], list[tuple[int, str]], list[Degradation]]:
    """The sources with notes (first seen first, at most `limit`), their notes numbered 1..N, and a
    `source_dropped` for the sources with notes the cap left out (with their notes)."""
    sources: dict[str, SourceRef] = {}
    dropped: dict[str, SourceRef] = {}
    for f in findings:
        noted = {n.source_id for n in f.notes}
        for source in f.sources:
            if source.id not in noted or source.id in sources or source.id in dropped:
                continue
            if len(sources) < limit:
                sources[source.id] = source
            else:
                dropped[source.id] = source
    number = {sid: i for i, sid in enumerate(sources, start=1)}
    notes = [(number[n.source_id], n.text) for f in findings for n in f.notes if n.source_id in number]
    lost_notes = len({(n.source_id, n.text) for f in findings for n in f.notes if n.source_id in dropped})
    problems = (
        [
            degradation(
                "source_dropped",
                "write_report",
                f"{len(dropped)} of {len(sources) + len(dropped)} sources with notes left out of the report "
                f"(report_sources = {limit}), with their {lost_notes} notes: "
                + ", ".join(s.url or s.title or s.id for s in dropped.values()),
                count=len(dropped),
            )
        ]
        if dropped
        else []
    )
    return list(sources.values()), list(dict.fromkeys(notes)), problems


async def write_report(state: DeepResearchState, runtime: Runtime[EpisodeContext]) -> PipelineOutput:
    options = _options(runtime)
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    findings = _sorted_findings(state)
    sources, notes, dropped = _report_material(findings, options.report_sources)
    clarification = state.get("clarification")
    query = view_of(state, runtime, PIPELINE).query
    shown, trimmed = notes, []
    while True:  # a prompt longer than the model's context is written again from fewer notes
        try:
            report = await write_cited_report(
                gateway,
                query,
                _context_text(state, options),
                state["brief"],
                sources,
                shown,
                clarification.pairs() if clarification else [],
                options.report_tokens,
            )
            break
        except ModelCallError as exc:
            if not context_overflowed(exc) or not shown:
                raise
            shown = trimmed_notes(shown)
            trimmed = [
                degradation(
                    "step_fallback",
                    "write_report",
                    f"the prompt overflowed the writer's context: report written from {len(shown)} of "
                    f"{len(notes)} notes ({exc.server_message or exc})",
                )
            ]
    forget_episode(pipeline_context(runtime, PIPELINE), state.get("episode", ""))
    recalls = [Recall.model_validate(r) for r in [*state.get("recalls", []), *(r for f in findings for r in f.recalls)]]
    degraded = [
        *state.get("degraded", []),
        *(d for f in findings for d in f.degraded),
        *(d for d in recall_degradations(options, recalls, "write_brief") if d.step != "recall_memory"),
        *dropped,
        *trimmed,
        *citation_degradations(report, "write_report"),
    ]
    text = report.text
    if not notes:  # each researcher recorded its `no_findings`; the report itself says what it rests on
        text = f"{text.rstrip()}\n\n_Note: this report rests on no sources: the research found nothing to cite._"
    meta = meta_of(state, runtime, PIPELINE) | {
        "design": options.design,
        "plan_review": state.get("plan_review", {"status": "off"}),
        "supervisor_turns": state.get("supervisor_turns", 0),
        "clarify": clarification.model_dump() if clarification else None,
        "citations": report.stats,
        "rounds": state.get("round", 0),
        "researchers": len(findings),
        "searches": sum(f.searches for f in findings),
        "fetches": sum(f.fetches for f in findings),
        "sources_read": len({s.id for f in findings for s in f.sources}),
        "sources_shared": sum(f.reused for f in findings),  # fetched and noted by another researcher
        "notes": len({(n.source_id, n.text) for f in findings for n in f.notes}),
        "report_notes": len(shown),
        "no_findings": not notes,
        "critical_path_calls": state.get("depth", 0) + 1,
        **recalls_meta(options, recalls),
    }
    return {"response": SystemResponse(text=text, citations=report.citations, meta=meta, degraded=degraded)}


# ----------------------------------------------------------------------------- one researcher


async def search(state: ResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["read"]]:
    options = _options(runtime)
    resources = pipeline_resources(runtime, PIPELINE)
    read = state.get("sources", [])
    if state["gold_sources"]:  # gold_context: all of the gold information replaces search (no web budget)
        return Command(goto="read", update={"hits": [], "new_sources": state["gold_sources"]})
    room = options.max_pages - len(read)
    searched = state.get("searched", [])
    queries, problems = checked_queries(
        state.get("pending_queries", state["queries"]), state["topic"], "search", seen=searched
    )
    used = state.get("searches", 0) + state.get("fetches", 0)
    queries = queries[: max(0, options.max_tool_calls - used - 1)]  # keep a call for at least one fetch
    skip = list(state["skip_urls"]) + [s.url for s in read if s.url]
    hits, failures = await search_web(
        await resources.open_web(), queries, options.results_per_query, max(0, room), skip
    )
    return Command(
        goto="read",
        update={
            "hits": hits,
            "new_sources": [],
            "searches": state.get("searches", 0) + len(queries),
            "searched": [*searched, *queries],
            "degraded": _more(state, *problems, *failures),
        },
    )


async def read(state: ResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["take_notes"]]:
    options = _options(runtime)
    if state["gold_sources"]:
        picked = state.get("new_sources", [])
        return Command(goto="take_notes", update={"sources": state.get("sources", []) + picked})
    resources = pipeline_resources(runtime, PIPELINE)
    used = state.get("searches", 0) + state.get("fetches", 0)
    hits = state.get("hits", [])[: max(0, options.max_tool_calls - used)]
    reads = _episode_reads(state, runtime)
    mine = [hit for hit in hits if reads.claim(hit.url)]  # the others' pages another researcher reads
    sources, claims, failures = await fetch_claimed(await resources.open_web(), resources.sources, reads, mine)
    return Command(
        goto="take_notes",
        update={
            "new_sources": sources,
            "new_claims": claims,
            "reused_urls": [hit.url for hit in hits if hit not in mine],
            "sources": state.get("sources", []) + sources,
            "fetches": state.get("fetches", 0) + len(mine),
            "degraded": _more(state, *failures),
        },
    )


def _episode_reads(state: ResearcherState, runtime: Runtime[EpisodeContext]) -> EpisodeReads:
    """What this episode's researchers read (a researcher given no episode id shares with no one)."""
    episode = state.get("episode")
    return episode_reads(pipeline_context(runtime, PIPELINE), episode) if episode else EpisodeReads()


async def take_source_notes(state: ResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["assess"]]:
    """Notes from each newly read source, in parallel; each note tied to its source by code."""
    options = _options(runtime)
    resources = pipeline_resources(runtime, PIPELINE)
    reads = _episode_reads(state, runtime)
    new = state.get("new_sources", [])

    async def one(source: SourceRef) -> list[Note] | Degradation:
        text = resources.sources.get(source.sha256)[: options.page_chars]
        try:
            taken = await take_notes(
                resources.gateway, state["topic"], state["focus"], source.title, text, options.notes_per_source
            )
        except ModelCallError as exc:  # the other sources' notes stand; this one is left out, and recorded
            return degradation(
                "step_fallback", "take_notes", f"source left out: notes from {source.url or source.title}: {exc}"
            )
        return [Note(source_id=source.id, text=t) for t in taken]

    outcomes = await asyncio.gather(*(one(s) for s in new))
    for source, url, outcome in zip(new, state.get("new_claims", []), outcomes):  # before waiting for anyone
        reads.publish(url, source, [] if isinstance(outcome, Degradation) else outcome)
    # the pages another researcher of the episode claimed: its source and notes, no fetch, no call
    own: list[SourceRef] = []
    fetches, problems = 0, [o for o in outcomes if isinstance(o, Degradation)]
    waited = await asyncio.gather(*(reads.wait(url) for url in state.get("reused_urls", [])))
    unclaimed = [WebHit(url=u) for u, got in zip(state.get("reused_urls", []), waited) if got is None]
    if unclaimed:  # claimed before this episode was resumed in this process: read here after all
        unclaimed = [hit for hit in unclaimed if reads.claim(hit.url)]
        own, claims, failures = await fetch_claimed(await resources.open_web(), resources.sources, reads, unclaimed)
        late = await asyncio.gather(*(one(s) for s in own))
        for source, url, outcome in zip(own, claims, late):
            reads.publish(url, source, [] if isinstance(outcome, Degradation) else outcome)
        fetches, problems = len(unclaimed), [*problems, *failures, *(o for o in late if isinstance(o, Degradation))]
        waited = [*waited, *(await asyncio.gather(*(reads.wait(hit.url) for hit in unclaimed)))]
    known = {s.id for s in state.get("sources", [])}
    shared_sources: list[SourceRef] = []
    shared_notes: list[Note] = []
    for got in waited:
        if got is not None and got[0] is not None and got[0].id not in known:
            known.add(got[0].id)
            shared_sources.append(got[0])
            shared_notes += got[1]
    taken = [n for batch in outcomes if not isinstance(batch, Degradation) for n in batch]
    return Command(
        goto="assess",
        update={
            "sources": state.get("sources", []) + shared_sources,
            "notes": state.get("notes", []) + taken + shared_notes,
            "reused": state.get("reused", 0) + len(shared_sources) - len(own),
            "fetches": state.get("fetches", 0) + fetches,
            "reused_urls": [],
            "degraded": _more(state, *problems),
            "steps": state.get("steps", 0) + 1,
            "chain_calls": state.get("chain_calls", 0) + (1 if new or fetches else 0),
        },
    )


def _findings(state: ResearcherState, covered: bool, depth: int) -> Findings:
    """What the researcher hands back; one that found nothing says so."""
    degraded = state.get("degraded", [])
    if not state.get("notes"):
        degraded = [
            *degraded,
            degradation(
                "no_findings",
                "researcher",
                f"{state['topic']!r}: no notes from {len(state.get('sources', []))} sources read",
            ),
        ]
    return Findings(
        index=state["index"],
        round=state["research_round"],
        topic=state["topic"],
        sources=state.get("sources", []),
        notes=state.get("notes", []),
        searches=state.get("searches", 0),
        fetches=state.get("fetches", 0),
        steps=state.get("steps", 0),
        covered=covered,
        critical_path_calls=depth,
        reused=state.get("reused", 0),
        degraded=degraded,
    )


async def assess(state: ResearcherState, runtime: Runtime[EpisodeContext]) -> Command[Literal["search", "__end__"]]:
    """Another step if the notes do not cover the sub-topic and the budgets allow it."""
    options = _options(runtime)
    depth = state.get("chain_calls", 0)
    pages_left = options.max_pages - len(state.get("sources", []))
    calls_left = options.max_tool_calls - state.get("searches", 0) - state.get("fetches", 0)
    can_go_on = state.get("steps", 0) < options.max_steps and pages_left > 0 and calls_left >= 2  # search + fetch
    if state["gold_sources"] or not can_go_on:  # gold_context: everything was read in one step
        return Command(goto=END, update={"findings": [_findings(state, False, depth)]})  # type: ignore[arg-type]  # langgraph types END as str, not Literal["__end__"]
    gateway = pipeline_resources(runtime, PIPELINE).gateway
    try:
        coverage = await assess_coverage(
            gateway, state["topic"], state["focus"], [n.text for n in state.get("notes", [])], options.queries_per_topic
        )
    except ModelCallError as exc:  # the notes taken stand; the researcher stops here
        failed: ResearcherState = {
            **state,
            "degraded": _more(
                state, degradation("step_fallback", "assess", f"researcher stopped at {state['topic']!r}: {exc}")
            ),
        }
        return Command(goto=END, update={"findings": [_findings(failed, False, depth + 1)]})  # type: ignore[arg-type]  # langgraph types END as str, not Literal["__end__"]
    depth += 1
    if coverage.covered or not coverage.follow_up_queries:
        return Command(goto=END, update={"findings": [_findings(state, coverage.covered, depth)]})  # type: ignore[arg-type]  # langgraph types END as str, not Literal["__end__"]
    return Command(goto="search", update={"pending_queries": coverage.follow_up_queries, "chain_calls": depth})
