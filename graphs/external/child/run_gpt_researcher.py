"""gpt-researcher on one brief.

Its LLMs are named by call (`openai:fast`, `openai:smart`, `openai:strategic`) and reach the
endpoint through `OPENAI_BASE_URL` / `OPENAI_API_KEY`; embeddings too (`custom:local`). It
searches with its `searx` retriever at the run's agent web (`SEARX_URL`), whose result URLs are
pages of the endpoint, so its own scraper also fetches through the run's web.

One tolerance is added: gpt-researcher asks for its sub-queries in prose and parses the free-text
answer as a JSON list; an answer that is no list (a weak model's, or the scripted model's) crashes
it (`'str' object has no attribute 'append'`). Such an answer counts as no sub-queries here, so it
researches the task itself — what it does when the planner returns an empty list — and the
fallback is reported in `details["unparsed_plans"]`.
"""

from __future__ import annotations

import json
import tempfile

IMPORTS = ("gpt_researcher",)
DEFAULTS = {
    "RETRIEVER": "searx",
    "SCRAPER": "bs",
    "FAST_LLM": "openai:fast",
    "SMART_LLM": "openai:smart",
    "STRATEGIC_LLM": "openai:strategic",
    "EMBEDDING": "custom:local",
    "REPORT_SOURCE": "web",
    "VERBOSE": False,
}


def tolerate_unparsed_plans(unparsed: list[str]) -> None:
    """Sub-queries that are not a list of strings become none (noted in `unparsed`)."""
    from gpt_researcher.actions import query_processing

    original = query_processing.generate_sub_queries

    async def generate_sub_queries(*args, **kwargs):
        answer = await original(*args, **kwargs)
        if isinstance(answer, list) and all(isinstance(q, str) for q in answer):
            return answer
        unparsed.append(repr(answer)[:300])
        return [q for q in answer if isinstance(q, str) and q.strip()] if isinstance(answer, list) else []

    query_processing.generate_sub_queries = generate_sub_queries  # plan_research_outline looks it up here


async def run(job: dict) -> dict:
    from gpt_researcher import GPTResearcher

    settings = dict(job.get("settings") or {})
    report_type = settings.pop("report_type", "research_report")
    config = {**DEFAULTS, **settings}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
        json.dump(config, fh)
    unparsed: list[str] = []
    tolerate_unparsed_plans(unparsed)
    researcher = GPTResearcher(query=job["brief"], report_type=report_type, config_path=fh.name, verbose=False)
    context = await researcher.conduct_research()
    report = await researcher.write_report()
    if not report or not str(report).strip():
        raise RuntimeError("gpt-researcher wrote an empty report")
    return {
        "report": str(report),
        "sources": list(researcher.get_source_urls()),
        "details": {
            "context_items": len(context or []),
            "unparsed_plans": unparsed,
            "agent_role": str(getattr(researcher, "role", "") or "")[:300],
        },
    }
