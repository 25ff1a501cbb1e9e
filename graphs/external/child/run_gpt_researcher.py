"""gpt-researcher on one brief.

Its LLMs are named by call (`openai:fast`, `openai:smart`, `openai:strategic`) and reach the
endpoint through `OPENAI_BASE_URL` / `OPENAI_API_KEY`; embeddings too (`custom:local`). It
searches with its `searx` retriever at the run's agent web (`SEARX_URL`), whose result URLs are
pages of the endpoint, so its own scraper also fetches through the run's web.
"""

from __future__ import annotations

import json
import tempfile

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


async def run(job: dict) -> dict:
    from gpt_researcher import GPTResearcher

    settings = dict(job.get("settings") or {})
    report_type = settings.pop("report_type", "research_report")
    config = {**DEFAULTS, **settings}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
        json.dump(config, fh)
    researcher = GPTResearcher(query=job["brief"], report_type=report_type, config_path=fh.name, verbose=False)
    context = await researcher.conduct_research()
    report = await researcher.write_report()
    if not report or not str(report).strip():
        raise RuntimeError("gpt-researcher wrote an empty report")
    return {
        "report": str(report),
        "sources": list(researcher.get_source_urls()),
        "details": {"context_items": len(context or []), "agent_role": str(getattr(researcher, "role", "") or "")[:300]},
    }
