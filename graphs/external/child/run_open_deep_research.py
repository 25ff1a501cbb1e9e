"""open_deep_research (LangChain's `deep_researcher` graph) on one brief.

Its models are named by call (`openai:research`, ...) so the endpoint can tell the calls apart;
`OPENAI_BASE_URL` and `OPENAI_API_KEY` (the session's token) in this process's environment point
them at the endpoint. It searches through the endpoint's MCP tools (`search_api = "none"` and
`mcp_config`), the hook the package offers for other search backends. Clarification is off by
default: the brief already carries what the user said about themselves (PDR-Bench's protocol).
"""

from __future__ import annotations

import re

IMPORTS = ("open_deep_research.deep_researcher",)
CALLS = ("research", "summarization", "compression", "final_report")
MCP_PROMPT = (
    "Search the web with the `web_search` tool (it returns each result's URL and an excerpt of its "
    "page) and read a whole page with `fetch_page` when the excerpt is not enough. Cite the URLs "
    "these tools give you."
)
FAILED_REPORT = re.compile(r"^Error generating final report", re.IGNORECASE)
# a research unit whose compression failed three times: the supervisor gets this text as its findings
FAILED_RESEARCH = re.compile(r"^Error synthesizing research report", re.IGNORECASE)
NOT_RUN = re.compile(r"^Error: Did not run this research", re.IGNORECASE)
URL = re.compile(r"https?://[^\s)\]>\"'`]+")


def configurable(job: dict) -> dict:
    config = {
        "allow_clarification": False,
        "search_api": "none",
        "mcp_config": {
            "url": job["endpoint"]["web_root"],
            "tools": ["web_search", "fetch_page"],
            "auth_required": False,
        },
        "mcp_prompt": MCP_PROMPT,
        **{f"{call}_model": f"openai:{call}" for call in CALLS},
    }
    config.update(job.get("settings") or {})
    return config


def research_units(state: dict) -> tuple[list[str], list[str]]:
    """What each research unit the supervisor ran gave back (its `ConductResearch` tool results),
    and of them the failures (`Error synthesizing research report: ...`). Overflow units it refused
    to run are neither."""
    results = [
        str(getattr(m, "content", ""))
        for m in state.get("supervisor_messages") or []
        if getattr(m, "type", "") == "tool" and getattr(m, "name", "") == "ConductResearch"
    ]
    ran = [text for text in results if not NOT_RUN.match(text)]
    return ran, [text for text in ran if FAILED_RESEARCH.match(text)]


def check_research(state: dict) -> list[dict]:
    """Every research unit failed: the agent's failure (its report rests on error messages). Some
    failed: a degradation per the run's protocol (`{"kind", "step", "detail", "count"}`)."""
    ran, failed = research_units(state)
    if not failed:
        return []
    if len(failed) == len(ran):
        raise RuntimeError(f"open_deep_research: every research unit failed ({len(failed)}): {failed[0][:300]}")
    return [
        {
            "kind": "step_fallback",
            "step": "open_deep_research:compress_research",
            "detail": f"{len(failed)} of {len(ran)} research units failed: {failed[0][:200]}",
            "count": len(failed),
        }
    ]


async def run(job: dict) -> dict:
    from open_deep_research.deep_researcher import deep_researcher

    config = {"configurable": configurable(job), "recursion_limit": int(job.get("recursion_limit", 100))}
    state = await deep_researcher.ainvoke({"messages": [{"role": "user", "content": job["brief"]}]}, config)
    report = str(state.get("final_report") or "")
    if not report:
        last = state.get("messages", [])[-1:] or [None]
        said = getattr(last[0], "content", "") if last[0] is not None else ""
        raise RuntimeError(f"open_deep_research ended without a report; its last message: {str(said)[:300]!r}")
    if FAILED_REPORT.match(report):
        raise RuntimeError(f"open_deep_research: {report[:500]}")
    degraded = check_research(state)
    ran, failed = research_units(state)  # its final state clears `notes`: the units' results are the notes
    return {
        "report": report,
        "sources": URL.findall(report),
        "degraded": degraded,
        "details": {
            "research_brief": str(state.get("research_brief") or ""),
            "notes": len(ran) - len(failed),
            "failed_research_units": len(failed),
        },
    }
