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
    notes = state.get("notes") or []
    return {
        "report": report,
        "sources": URL.findall(report),
        "details": {"research_brief": str(state.get("research_brief") or ""), "notes": len(notes)},
    }
