"""`external`: an external deep-research agent as the system under test.

    brief -> run_agent

`brief` writes the agent's input: the task and the user context the memory backend recalled
(PDR-Bench's protocol). `run_agent` opens a session on the run's agent endpoint (the gateway as
an OpenAI-compatible API, the run's web as SearXNG pages and MCP tools), runs the agent in a
child process pointed only at it, and turns its report into a `SystemResponse` whose citations
are the sources it cited among those it actually read (each with the sha256 of that text, kept in
the run's source store). A failing agent fails the episode with the agent's own error and the
tail of its log.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import ValidationError

from atelier.agents.external_brief import agent_brief
from atelier.agents.models.ledger import current_tags
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.common.errors import AtelierError
from atelier.graphs.context import EpisodeContext
from atelier.graphs.external.agents import AGENTS, base_env, session_env
from atelier.graphs.external.endpoint import endpoint_for
from atelier.graphs.external.langgraph_agent import run_langgraph_agent
from atelier.graphs.external.launcher import command_read_only, run_agent_job
from atelier.graphs.external.options import ExternalOptions
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.pipelines import PipelineSpec, register_pipeline
from atelier.graphs.resources import run_path
from atelier.graphs.sources import uncited
from atelier.graphs.start import (
    meta_of,
    pipeline_context,
    pipeline_options_of,
    pipeline_resources,
    start_inputs,
    view_of,
)
from atelier.tools.agent_web import WebSession
from atelier.tools.errors import ReplayMiss

PIPELINE = "external"
LOG_TAIL_CHARS = 1500
TIMINGS = "timings.json"
# Agents parse JSON out of free text they asked for in prose; the scripted model's text is no such JSON.
DRY_RUN_HINT = " [a dry run: the scripted model's free text may not be the JSON this agent parses from prose]"
# an agent's error that says it could not parse what it was given
_PARSE_FAILURE = re.compile(
    r"JSONDecodeError|Expecting value|ValidationError|validation error|OutputParserException|could not parse"
    r"|not valid JSON|Invalid JSON|parse",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s)\]>\"'`]+")
# a reference-list line: "[3] Title: https://...", "3. https://...", "- [3] ..."
_NUMBERED = re.compile(r"^\s*(?:[-*]\s*)?(?:\[(\d{1,3})\]|(\d{1,3})[.)])\s")


class ExternalAgentError(AtelierError):
    """The external agent did not produce a report."""


class ExternalState(PipelineInput, PipelineOutput, total=False):
    brief: str


def _options(runtime: Runtime[EpisodeContext]) -> ExternalOptions:
    return pipeline_options_of(runtime, PIPELINE, ExternalOptions)


async def write_brief(state: ExternalState, runtime: Runtime[EpisodeContext]) -> Command[Literal["run_agent"]]:
    state, update = await start_inputs(state, runtime, PIPELINE)
    brief = agent_brief(view_of(state, runtime, PIPELINE), state["user_context"].text)
    return Command(goto="run_agent", update={**update, "brief": brief})


def _run_workdir(context: EpisodeContext, case_id: str) -> Path | None:
    """`<run>/external/<system>/<case>/`: the agent's input, output, log, response and timings."""
    if not context.run_dir:
        return None
    return run_path(
        context.run_dir,
        "external",
        context.system.name,
        re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id),
        what="system name and case id",
    )


def _workdir(context: EpisodeContext, case_id: str) -> Path:
    folder = _run_workdir(context, case_id) or Path(tempfile.mkdtemp(prefix="atelier-external-"))
    no_follow.make_folders(folder)
    return folder


def _job_files(workdir: Path, job: dict[str, Any]) -> Path:
    """The job's input written, the last attempt's output and timings removed; the output's path."""
    # the job may have left links in its folder: files are replaced, never written or read through one
    write_atomically(workdir / "input.json", json.dumps(job, ensure_ascii=False, indent=1))
    (workdir / TIMINGS).unlink(missing_ok=True)
    output = workdir / "output.json"
    output.unlink(missing_ok=True)
    return output


def _write_timings(workdir: Path, wall_s: float, run_s: float | None) -> None:
    """The agent process's wall time, and of it `startup_s`: until its run started (a fork of the
    preloaded agent server; the first job of a server also waits for its imports). Kept beside the
    response, not in it: a replayed run's responses stay identical."""
    timings = {
        "wall_s": round(wall_s, 3),
        "run_s": run_s,
        "startup_s": round(wall_s - run_s, 3) if run_s is not None else None,
    }
    write_atomically(workdir / TIMINGS, json.dumps(timings))


def bench_figures(context: EpisodeContext, case_id: str) -> dict[str, Any]:
    """`startup_s` of the agent process of `case_id` (for `atelier bench graph`)."""
    folder = _run_workdir(context, case_id)
    path = folder / TIMINGS if folder else None
    return {"startup_s": json.loads(no_follow.read_text(path))["startup_s"]} if path and path.exists() else {}


def _bounded(result: dict[str, Any], options: ExternalOptions, workdir: Path) -> dict[str, Any]:
    """The agent's result within what the run keeps: a report past `max_report_chars` cut there (the
    child cuts it itself; this holds for one that did not), a log that reached the job's file size
    limit said to be cut; each an `output_truncated` degradation."""
    degraded = list(result.get("degraded") or [])
    report = result.get("report")
    if isinstance(report, str) and len(report) > options.max_report_chars:
        detail = (
            f"the agent's report of {len(report)} characters was cut to the {options.max_report_chars} the run keeps"
        )
        degraded.append({"kind": "output_truncated", "step": "report", "detail": detail, "count": 1})
        result = {**result, "report": report[: options.max_report_chars]}
    log = workdir / "agent.log"
    limit = options.limits.file_mb << 20
    if options.isolation == "namespaces" and log.exists() and os.lstat(log).st_size >= limit:
        detail = f"the agent's log reached the job's file size limit ({options.limits.file_mb} MB) and was cut there"
        degraded.append({"kind": "output_truncated", "step": "agent_log", "detail": detail, "count": 1})
    return {**result, "degraded": degraded}


def _log_tail(workdir: Path) -> str:
    text = no_follow.read_text(workdir / "agent.log", errors="replace").strip()
    return text[-LOG_TAIL_CHARS:]


def _reference_numbers(report: str, web: WebSession) -> dict[str, int]:
    """The number the agent's own reference list gives each source it read ("[3] ... URL")."""
    numbers: dict[str, int] = {}
    for line in report.splitlines():
        marker = _NUMBERED.match(line)
        if marker is None:
            continue
        for url in _URL.findall(line):
            source = web.source_for(url)
            if source is not None:
                numbers.setdefault(source.id, int(marker.group(1) or marker.group(2)))
    return numbers


def _unverified(urls: list[str]) -> list[Degradation]:
    """URLs the report cites that the agent was never shown: kept in its text (it is the agent's
    report), counted as no citation, and recorded."""
    if not urls:
        return []
    detail = f"{len(urls)} URL(s) in the report the agent never read, not counted as citations: {', '.join(urls[:3])}"
    return [degradation("citation_removed", "citations", detail, count=len(urls))]


def _agent_degradations(items: list[Any]) -> list[Degradation]:
    """The steps the agent says degraded; one that is no degradation fails the episode naming it."""
    out = []
    for index, item in enumerate(items):
        try:
            out.append(Degradation.model_validate(item))
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(item)'}: {e['msg']}" for e in exc.errors()[:3])
            raise ExternalAgentError(f"the agent's degraded[{index}] is not a degradation: {problem}") from None
    return out


def dry_run_may_explain(error: str, dry_run: bool, model: Any) -> bool:
    """Whether an agent's failure may be the scripted model's free text: a dry run's agent that
    asked the model (without a model error) and then failed to parse something."""
    return dry_run and bool(model.calls) and not model.errors and bool(_PARSE_FAILURE.search(error))


def agent_response(result: dict[str, Any], web: WebSession, meta: dict[str, Any]) -> SystemResponse:
    """The agent's report, its citations the sources it cites among those it read."""
    report = str(result.get("report") or "")
    for source in web.sources.values():  # an agent that scraped our pages cites their addresses here
        report = report.replace(web.page_url(source), source.url)
    # a command agent lists its citations (numbered as listed); other agents cite in their text
    listed = [str(c.get("url") or "") for c in result.get("citations") or [] if isinstance(c, dict)]
    cited, unknown = web.cited([*listed, *_URL.findall(report)])
    numbers = _reference_numbers(report, web)
    for number, url in enumerate(listed, 1):
        listed_source = web.source_for(url)
        if listed_source is not None:
            numbers.setdefault(listed_source.id, number)
    # a source the agent saw only as a search result's snippet has no page text read: no sha256
    citations = [
        Citation(source_id=s.id, url=s.url, title=s.title or None, sha256=s.sha256, number=numbers.get(s.id))
        for s in cited
    ]
    refs = [ref.model_dump() for s in web.sources.values() if (ref := s.ref()) is not None]
    return SystemResponse(
        text=report,
        citations=citations,
        # the agent's own degraded steps (e.g. some of open_deep_research's research units failed)
        degraded=[
            *web.degraded,
            *_agent_degradations(result.get("degraded") or []),
            *_unverified(unknown),
            *uncited(citations, "run_agent"),
        ],
        meta={
            **meta,
            "citations": {
                "urls": len(cited) + len(unknown),
                "sources_cited": len(citations),
                "cited_from_snippet": [s.url for s in cited if not s.sha256],
                "unverified_urls": unknown,  # URLs in the report the agent was never shown
                "sources_read": len(refs),
            },
            "searches": web.searches,
            "searches_refused": web.searches_refused,
            "fetches": web.fetches,
            "sources_read": refs,
            "agent_sources": len(result.get("sources") or []),
            "refused": result.get("refused") or [],
            "details": result.get("details") or {},
        },
    )


async def run_agent(state: ExternalState, runtime: Runtime[EpisodeContext]) -> Command[Literal["__end__"]]:
    context = pipeline_context(runtime, PIPELINE)
    options = _options(runtime)
    if options.agent == "langgraph":  # a server elsewhere: no process of ours, no launcher
        response = await run_langgraph_agent(state, runtime, options)
        return Command(goto=END, update={"response": response})  # type: ignore[arg-type]  # langgraph types END as str
    await asyncio.to_thread(options.check_available)  # probes the OS boundary: a subprocess, off the event loop
    spec = AGENTS[options.agent]
    resources = pipeline_resources(runtime, PIPELINE)
    endpoint = await asyncio.to_thread(endpoint_for, context)
    web = await asyncio.to_thread(resources.web)
    tags = {k: v for k, v in current_tags().items() if k in ("case", "system")}
    case_id = tags.get("case") or view_of(state, runtime, PIPELINE).id
    workdir = await asyncio.to_thread(_workdir, context, case_id)
    roles = {**spec.call_roles, **options.call_roles}
    with endpoint.session(
        resources.gateway,
        web,
        agent=spec.name,
        tags=tags,
        roles=roles,
        max_results=options.max_results,
        page_chars=options.page_chars,
        keep=resources.sources.put,
        max_searches=options.search_cap(),
        bound=options.isolation == "namespaces",  # answered only on its own job's connections
    ) as (model, web_session):
        assert web_session is not None
        view = view_of(state, runtime, PIPELINE)
        job = {
            "agent": spec.name,
            "brief": state["brief"],
            "task": view.query.text,
            "user_context": state["user_context"].text,
            "case_id": view.id,
            "settings": options.settings,
            "today": options.today.isoformat() if options.today else None,
            "max_report_chars": options.max_report_chars,
            "endpoint": {"openai_base": endpoint.openai_base, "web_root": web_session.root},
        }
        command_cwd = ""
        if options.command is not None:  # resolved here: the job runs in its own working folder
            # os.getcwd off the event loop: Studio's server refuses blocking calls there
            command_cwd = options.cwd if options.cwd else await asyncio.to_thread(os.getcwd)
            job["command"] = {"argv": options.command, "job_via": options.job_via, "cwd": command_cwd}
        output = await asyncio.to_thread(_job_files, workdir, job)
        env = session_env(endpoint.openai_base, model.token, web_session.root, web_session.proxy)
        # a command's program, the files its argv names and its working folder: visible, read-only
        visible = (
            command_read_only(options.command, command_cwd, {**base_env(), **env})
            if options.command is not None
            else []
        )
        started = time.perf_counter()
        code = await run_agent_job(
            options.python,
            spec.name,
            workdir / "input.json",
            output,
            workdir / "agent.log",
            env,
            options.timeout_s,
            options.isolation,
            read_only=visible,
            bind=endpoint.bind(model.token),
            limits=options.limits.model_dump(),
        )
        wall_s = time.perf_counter() - started
        if code is None:
            raise ExternalAgentError(
                f"{spec.name} did not finish within {options.timeout_s:g} s (log: {workdir / 'agent.log'})"
            )
        if not output.exists():
            raise ExternalAgentError(
                f"{spec.name} exited with code {code} and no result; its log ends:\n"
                + await asyncio.to_thread(_log_tail, workdir)
            )
        result = json.loads(await asyncio.to_thread(no_follow.read_text, output))
        result = await asyncio.to_thread(_bounded, result, options, workdir)
        if result.get("error"):
            model_errors = f"; model errors: {model.errors[-1]}" if model.errors else ""
            dry = DRY_RUN_HINT if dry_run_may_explain(result["error"], resources.gateway.dry_run, model) else ""
            raise ExternalAgentError(
                f"{spec.name} failed: {result['error']}{model_errors}{dry} (log: {workdir / 'agent.log'})"
            )
        if web_session.replay_misses:  # the agent answered from less web than was recorded: not a result
            raise ReplayMiss(
                f"{len(web_session.replay_misses)} request(s) of {spec.name} missing from the replayed "
                f"web, e.g. {web_session.replay_misses[0]}"
            )
        await asyncio.to_thread(_write_timings, workdir, wall_s, result.get("run_s"))
        meta = meta_of(state, runtime, PIPELINE) | {
            "agent": spec.name,
            "isolation": options.isolation,
            "calls": dict(sorted(model.calls.items())),
        }
        response = agent_response(result, web_session, meta)
    await asyncio.to_thread(write_atomically, workdir / "response.json", response.model_dump_json(indent=1))
    return Command(goto=END, update={"response": response})  # type: ignore[arg-type]  # langgraph types END as str, not Literal["__end__"]


def build_external_graph():
    graph = StateGraph(
        ExternalState, context_schema=EpisodeContext, input_schema=PipelineInput, output_schema=PipelineOutput
    )
    graph.add_node("brief", write_brief)
    graph.add_node("run_agent", run_agent)
    graph.add_edge(START, "brief")
    return graph.compile(name=PIPELINE)


register_pipeline(
    PipelineSpec(
        PIPELINE,
        "an external agent (open_deep_research, gpt_researcher, any command, any LangGraph server) through the "
        "gateway endpoint",
        build_external_graph,
        ExternalOptions,
        variant_option="agent",
        bench_figures=bench_figures,
    )
)
