"""The OpenAI Agents SDK's research agent (its `research_bot` pattern) on one brief.

Three SDK agents, as the SDK's research bot has them: a planner (structured output: the web
searches to make, each with its reason), a search agent run once per planned search (it must call
its search tool, then summarizes what it read), and a writer (structured output: a short summary,
the markdown report, follow-up questions). The bot's hosted `WebSearchTool` is OpenAI's own search,
which only the Responses API serves; here the search agent's tool is a function tool over the run's
agent web (`SEARX_URL`): it searches, reads the best pages through the endpoint and returns their
text under their citable URLs, which the writer is asked to cite.

Every model call is a chat completion at the run's endpoint (`OPENAI_BASE_URL`, the session's
token as the key), named by agent: `planner`, `search`, `writer` (the ledger's nodes
`openai_agents:planner`, ...). The SDK's tracing (an upload to OpenAI) is off.

Settings: `max_searches` (planned searches run, default 5), `pages_per_search` (pages read per
search, default 2), `page_chars` (characters of each page the search agent sees, default 1500).
"""

from __future__ import annotations

import asyncio
import os

IMPORTS = ("agents", "openai", "httpx")
DEFAULTS = {"max_searches": 5, "pages_per_search": 2, "page_chars": 1500}

PLANNER = (
    "You are a helpful research assistant. Given a query, come up with a set of web searches to perform to best "
    "answer the query. Output between 2 and 8 terms to query for."
)
SEARCHER = (
    "You are a research assistant. Given a search term, you search the web for that term with the web_search tool "
    "and produce a concise summary of the results. The summary must be 2-3 paragraphs and less than 300 words. "
    "Capture the main points, and keep the URL of each source you use next to what it says. This will be consumed "
    "by someone synthesizing a report, so it is vital you capture the essence and ignore any fluff."
)
WRITER = (
    "You are a senior researcher tasked with writing a cohesive report for a research query. You will be provided "
    "with the original query, and some initial research done by a research assistant. Write the report in "
    "markdown, citing the URLs of the sources you use, and end it with the list of those sources."
)


async def run(job: dict) -> dict:
    import httpx
    from openai import AsyncOpenAI
    from pydantic import BaseModel, Field

    # the SDK's package; mypy, checking Atelier, takes `agents` for Atelier's room of that name
    from agents import (  # type: ignore[attr-defined]
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    settings = {**DEFAULTS, **(job.get("settings") or {})}
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    web = httpx.AsyncClient(base_url=os.environ["SEARX_URL"], timeout=120, trust_env=False)

    def model(name: str) -> OpenAIChatCompletionsModel:
        return OpenAIChatCompletionsModel(model=name, openai_client=client)

    class WebSearchItem(BaseModel):
        reason: str = Field(description="Your reasoning for why this search is important to the query.")
        query: str = Field(description="The search term to use for the web search.")

    class WebSearchPlan(BaseModel):
        searches: list[WebSearchItem] = Field(description="A list of web searches to perform to best answer the query.")

    class ReportData(BaseModel):
        short_summary: str = Field(description="A short 2-3 sentence summary of the findings.")
        markdown_report: str = Field(description="The final report")
        follow_up_questions: list[str] = Field(description="Suggested topics to research further")

    searched: list[str] = []
    read: list[str] = []

    @function_tool
    async def web_search(query: str) -> str:
        """Search the web and read the best pages.

        Args:
            query: What to search for.
        """
        searched.append(query)
        response = await web.get("search", params={"q": query, "format": "json"})
        if response.status_code != 200:
            return f"The search failed ({response.status_code}): {response.text[:200]}"
        parts = []
        for result in response.json().get("results", [])[: int(settings["pages_per_search"])]:
            page = await web.get(f"page/{result['url'].rstrip('/').rsplit('/', 1)[-1]}")
            text = page.text if page.status_code == 200 else result.get("content", "")
            read.append(result["citable_url"])
            parts.append(
                f"Source: {result['citable_url']}\nTitle: {result['title']}\n{text[: int(settings['page_chars'])]}"
            )
        return "\n\n".join(parts) or "No results."

    planner = Agent(name="PlannerAgent", instructions=PLANNER, model=model("planner"), output_type=WebSearchPlan)
    searcher = Agent(
        name="SearchAgent",
        instructions=SEARCHER,
        model=model("search"),
        tools=[web_search],
        model_settings=ModelSettings(tool_choice="required"),
    )
    writer = Agent(name="WriterAgent", instructions=WRITER, model=model("writer"), output_type=ReportData)

    query = job["brief"]
    failed: list[str] = []
    try:
        plan = (await Runner.run(planner, f"Query: {query}")).final_output_as(WebSearchPlan)
        items = plan.searches[: int(settings["max_searches"])]

        async def search(item: WebSearchItem) -> str | None:
            try:
                result = await Runner.run(searcher, f"Search term: {item.query}\nReason for searching: {item.reason}")
                return str(result.final_output)
            except Exception as exc:  # noqa: BLE001 - as the research bot does: a failed search is skipped
                failed.append(f"{item.query!r}: {type(exc).__name__}: {exc}"[:300])
                return None

        summaries = [s for s in await asyncio.gather(*(search(item) for item in items)) if s]
        written = await Runner.run(writer, f"Original query: {query}\nSummarized search results: {summaries}")
        report = written.final_output_as(ReportData)
    finally:
        await web.aclose()
    degraded = [
        {"kind": "search_failed", "step": "openai_agents:search", "detail": detail, "count": 1} for detail in failed
    ]
    return {
        "report": report.markdown_report,
        "sources": list(dict.fromkeys(read)),
        "degraded": degraded,
        "details": {
            "planned": [item.query for item in plan.searches],
            "searched": searched,
            "summaries": len(summaries),
            "short_summary": report.short_summary,
            "follow_up_questions": report.follow_up_questions,
        },
    }
