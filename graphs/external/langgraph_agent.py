"""`agent = "langgraph"`: any LangGraph server's assistant as the system under test.

A DeerFlow server, open_deep_research under `langgraph dev`, a lab's own app: the episode opens a
thread on the server (`url`) and runs the assistant (`assistant_id`) with the case as the graph's
input — the recipe's `input` mapping, whose strings name the case (`{brief}`, `{task}`,
`{user_context}`, `{case_id}`, `{benchmark}`) and the run's endpoint (`{openai_base}`, `{api_key}`,
`{search_url}`, `{mcp_url}`); `context` and `config` take the same placeholders. An assistant
pointed at the run's endpoint (its OpenAI base URL and the session's token as its key) has every
model call go through the run's gateway, cache and ledger, tagged with the case, and searches the
run's web; one that uses its own models and search is still judged, with its calls unledgered.

An interrupt the assistant raises is answered by the simulated user (`interrupts =
"simulated_user"`) in the graph's own protocol (`resume_as`, graphs/external/interrupt_answers.py:
a clarify request's answers, or DeerFlow's `[ACCEPTED]` / `[EDIT_PLAN] ...` plan review) and the
run resumes, up to `max_interrupts`; each is recorded in the response (`meta.interrupts`). With
`interrupts = "fail"` the episode fails naming the interrupt. The report is read from the final
state (`report`, a dotted path); its citations from `citations` (a list of URLs or of objects with
`url`) or else the URLs in the report, each fetched through the run's web and kept in `sources/`
like every system's; a report that cites nothing is `no_findings`.

A server that fails, or does not answer within `timeout_s`, fails the episode with that reason; a
run past its time is cancelled on the server (it would go on, and the next episode queue behind
it). A server that goes away is named within seconds: it is asked `/ok` every `LIVENESS_S`
seconds while a run is waited for, and two refused asks in a row end the episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from langgraph.runtime import Runtime

from atelier.agents.models.ledger import current_tags
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.degradation import Degradation
from atelier.benchmarks.common.errors import AtelierError
from atelier.graphs.context import EpisodeContext
from atelier.graphs.external.endpoint import endpoint_for
from atelier.graphs.external.interrupt_answers import PROTOCOLS, Answered, Asker
from atelier.graphs.external.options import ExternalOptions
from atelier.graphs.inputs import case_from_input
from atelier.graphs.sources import CitedUrl, read_cited_pages, uncited
from atelier.graphs.start import meta_of, pipeline_context, pipeline_resources, view_of
from atelier.tools.errors import ReplayMiss

PIPELINE = "external"
LIVENESS_S = 1.5  # how often a server is asked /ok while a run is waited for
LIVENESS_MISSES = 2  # refused asks in a row that name it gone
PROBE_TIMEOUT_S = 5.0
CANCEL_TIMEOUT_S = 5.0
PLACEHOLDER = re.compile(r"\{(brief|task|user_context|case_id|benchmark|openai_base|api_key|search_url|mcp_url)\}")
URL = re.compile(r"https?://[^\s)\]>\"'`]+")


class LangGraphAgentError(AtelierError):
    """The LangGraph assistant gave no report: the server failed, went away, timed out or interrupted."""


def filled(value: Any, values: dict[str, str]) -> Any:
    """`value` with every `{name}` in its strings replaced (dicts and lists walked)."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], value)
    if isinstance(value, dict):
        return {k: filled(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, values) for v in value]
    return value


def at_path(state: Any, path: str) -> Any:
    """The value at a dotted path of the final state (`response.text`, `messages.-1.content`); None if absent."""
    value = state
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", part):
            index = int(part)
            value = value[index] if -len(value) <= index < len(value) else None
        else:
            return None
    return value


def cited_urls(report: str, listed: Any) -> list[CitedUrl]:
    """The report's citations: a listed state value (URLs, or objects with `url` and `title`),
    numbered as listed; else the URLs in the report, in order of first appearance."""
    found: list[tuple[str, str]] = []
    if isinstance(listed, list):
        for item in listed:
            url = item if isinstance(item, str) else item.get("url") if isinstance(item, dict) else None
            if isinstance(url, str) and url.startswith(("http://", "https://")):
                found.append((url, str(item.get("title") or "") if isinstance(item, dict) else ""))
    else:
        found = [(url.rstrip(".,;:"), "") for url in URL.findall(report)]
    unique = list(dict.fromkeys(found))
    return [CitedUrl(url=url, title=title, number=n) for n, (url, title) in enumerate(unique, 1)]


def pending_interrupts(thread_state: dict[str, Any]) -> list[dict[str, Any]]:
    """The interrupts a thread stopped at (its tasks', where the server lists them)."""
    found = [i for task in thread_state.get("tasks") or [] for i in task.get("interrupts") or []]
    return found or list(thread_state.get("interrupts") or [])


@dataclass
class Drive:
    """One episode's runs on a thread: where it is (the thread, the run in flight), what the
    simulated user answered, and what degraded in answering."""

    thread_id: str | None = None
    run_id: str | None = None
    asked: list[dict[str, Any]] = field(default_factory=list)
    degraded: list[Degradation] = field(default_factory=list)

    def run_created(self, created: Any) -> None:  # the SDK's on_run_created: a run's id as it starts
        self.run_id = created.get("run_id") if isinstance(created, dict) else None


async def drive(
    client: Any,
    options: ExternalOptions,
    run: dict[str, Any],
    answer: Callable[[Any, dict[str, Any]], Awaitable[Answered]],
    at: Drive,
) -> dict[str, Any]:
    """Run the assistant on a new thread, answering its interrupts: its final values (`at` holds
    the thread, the run in flight and the interrupts answered)."""
    assert options.assistant_id is not None
    at.thread_id = (await client.threads.create())["thread_id"]
    payload: dict[str, Any] = run
    for _ in range(options.max_interrupts + 1):
        out = await client.runs.wait(
            at.thread_id, options.assistant_id, **payload, raise_error=False, on_run_created=at.run_created
        )
        at.run_id = None  # it ended
        if isinstance(out, dict) and isinstance(out.get("__error__"), dict):
            error = out["__error__"]
            raise LangGraphAgentError(
                f"the assistant {options.assistant_id!r} failed on the server: {error.get('error')}: {error.get('message')}"
            )
        thread_state = await client.threads.get_state(at.thread_id)
        pending = pending_interrupts(thread_state)
        if not pending:
            return thread_state.get("values") or {}
        if options.interrupts == "fail":
            raise LangGraphAgentError(
                f"the assistant {options.assistant_id!r} interrupted ({str(pending[0].get('value'))[:200]}) and this "
                'system answers no interrupt (interrupts = "fail")'
            )
        if len(at.asked) >= options.max_interrupts:
            break
        resume = {}
        for interrupt in pending:
            answered = await answer(interrupt.get("value"), thread_state.get("values") or {})
            resume[interrupt["id"]] = answered.resume
            at.degraded += answered.degraded
            at.asked.append(
                {
                    "id": interrupt["id"],
                    "value": interrupt.get("value"),
                    "answer": answered.answer,
                    "resume": answered.resume,
                }
            )
        # the run's context and config again: a resumed run is a new run, without them it runs on the defaults
        payload = {"command": {"resume": resume}, "context": run.get("context"), "config": run.get("config")}
    last = str(at.asked[-1]["value"])[:200] if at.asked else ""
    raise LangGraphAgentError(
        f"the assistant {options.assistant_id!r} interrupted more than {options.max_interrupts} times (last: {last})"
    )


async def watch(url: str) -> str:
    """Return once the server at `url` has refused `/ok` `LIVENESS_MISSES` times in a row
    (`LIVENESS_S` apart): why. A server that answers anything at all (even 404) is there, and one
    too busy to answer in time is not counted gone (a hung server is what `timeout_s` is for)."""
    misses, why = 0, ""
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False) as probe:
        while misses < LIVENESS_MISSES:
            await asyncio.sleep(LIVENESS_S)
            try:
                await probe.get(f"{url.rstrip('/')}/ok")
                misses = 0
            except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:  # nobody listens (or it hung up)
                misses, why = misses + 1, f"{type(exc).__name__}: {str(exc)[:200] or 'refused'}"
            except httpx.TimeoutException:
                continue  # busy, not gone
    return why


async def cancel_run(client: Any, at: Drive) -> None:
    """Cancel the run in flight on the server (past its time, or the episode given up): left
    running, it would go on spending and the next episode queue behind it."""
    if at.thread_id and at.run_id:
        run_id, at.run_id = at.run_id, None
        with contextlib.suppress(Exception):  # the server may be gone: the episode has failed already
            await asyncio.wait_for(client.runs.cancel(at.thread_id, run_id), CANCEL_TIMEOUT_S)


async def drive_watched(
    client: Any, options: ExternalOptions, run: dict[str, Any], answer: Callable[..., Awaitable[Answered]], at: Drive
) -> dict[str, Any]:
    """`drive` within `timeout_s`, the server watched meanwhile; a run past its time, or on a server
    gone away, cancelled on it."""
    assert options.url is not None
    driving = asyncio.ensure_future(drive(client, options, run, answer, at))
    watching = asyncio.ensure_future(watch(options.url))
    try:
        done, _ = await asyncio.wait(
            {driving, watching}, timeout=options.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if driving in done:
            return driving.result()
        if watching in done:
            raise LangGraphAgentError(
                f"the LangGraph server at {options.url} went away during the run of {options.assistant_id!r}: "
                f"/ok refused {LIVENESS_MISSES} times {LIVENESS_S:g} s apart ({watching.result()})"
            )
        await cancel_run(client, at)
        raise LangGraphAgentError(
            f"the assistant {options.assistant_id!r} at {options.url} did not finish within {options.timeout_s:g} s "
            "(its run was cancelled on the server)"
        )
    finally:
        for task in (driving, watching):
            task.cancel()
        await asyncio.gather(driving, watching, return_exceptions=True)
        await cancel_run(client, at)  # a run still in flight: given up (cancelled, failed) but not ended


async def run_langgraph_agent(state: Any, runtime: Runtime[EpisodeContext], options: ExternalOptions) -> SystemResponse:
    """One episode of a LangGraph assistant: its report, citations and interrupts as a response."""
    from langgraph_sdk import get_client

    context = pipeline_context(runtime, PIPELINE)
    resources = pipeline_resources(runtime, PIPELINE)
    endpoint = await asyncio.to_thread(endpoint_for, context)
    web = await asyncio.to_thread(resources.web)
    tags = {k: v for k, v in current_tags().items() if k in ("case", "system")}
    view = view_of(state, runtime, PIPELINE)
    agent = f"langgraph:{options.assistant_id}"
    case = case_from_input(state, context)  # the simulated user's, with what only it may know

    protocol = PROTOCOLS[options.resume_as]
    asker = Asker(resources.gateway, case)

    async def answer(value: Any, thread_values: dict[str, Any]) -> Answered:
        return await protocol(value, thread_values, asker)

    with endpoint.session(
        resources.gateway,
        web,
        agent=agent,
        tags=tags,
        roles=options.call_roles,
        max_results=options.max_results,
        page_chars=options.page_chars,
        keep=resources.sources.put,
        max_searches=options.search_cap(),
    ) as (model, web_session):
        assert web_session is not None
        values = {
            "brief": state["brief"],
            "task": view.query.text,
            "user_context": state["user_context"].text,
            "case_id": view.id,
            "benchmark": case.benchmark,
            "openai_base": endpoint.openai_base,
            "api_key": model.token,
            "search_url": f"{web_session.root}/search",
            "mcp_url": f"{web_session.root}/mcp",
        }
        run = {
            "input": filled(options.input, values),
            "context": filled(options.context, values) or None,
            "config": filled(options.config, values) or None,
        }
        # (connect, read, write, pool): a run may take as long as the episode may
        client = get_client(url=options.url, timeout=(10.0, options.timeout_s, options.timeout_s, 10.0))
        at = Drive()
        try:
            final = await drive_watched(client, options, run, answer, at)
        except httpx.HTTPError as exc:  # the server went away, refused the run, or answered an error status
            raise LangGraphAgentError(
                f"the LangGraph server at {options.url} failed during the run of {options.assistant_id!r}: "
                f"{type(exc).__name__}: {str(exc)[:300] or 'connection lost'}"
            ) from None
        if web_session.replay_misses:
            raise ReplayMiss(
                f"{len(web_session.replay_misses)} request(s) of {agent} missing from the replayed web, "
                f"e.g. {web_session.replay_misses[0]}"
            )
        report = at_path(final, options.report)
        if not isinstance(report, str) or not report.strip():
            keys = ", ".join(sorted(final)[:12]) if isinstance(final, dict) else type(final).__name__
            raise LangGraphAgentError(
                f"the final state of {options.assistant_id!r} has no report at {options.report!r} (its keys: {keys})"
            )
        listed = at_path(final, options.citations) if options.citations else None
        cited = cited_urls(report, listed)
        pages, fetch_degraded = (
            await read_cited_pages(await resources.open_web(), resources.sources, cited, step="run_agent")
            if cited
            else ([], [])
        )
    unread = [p.cited.url for p in pages if p.read is None]
    citations = [p.citation() for p in pages]
    return SystemResponse(
        text=report,
        citations=citations,
        degraded=[*web_session.degraded, *at.degraded, *fetch_degraded, *uncited(citations, "run_agent")],
        meta=meta_of(state, runtime, PIPELINE)
        | {
            "agent": "langgraph",
            "url": options.url,
            "assistant_id": options.assistant_id,
            "thread_id": at.thread_id,
            "interrupts": at.asked,
            "resume_as": options.resume_as,
            "calls": dict(sorted(model.calls.items())),
            "searches": web_session.searches,
            "searches_refused": web_session.searches_refused,
            "fetches": web_session.fetches,
            "citations": {"cited": len(pages), "read": len(pages) - len(unread), "unread": unread},
        },
    )
