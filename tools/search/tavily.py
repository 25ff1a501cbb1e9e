"""Tavily's search API: POST /search with a bearer key, results in `results[]`."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from atelier.tools.api_keys import KeyedServiceConfig
from atelier.tools.search.base import SearchProvider, SearchResult
from atelier.tools.search.registry import register_provider


class TavilyOptions(KeyedServiceConfig):
    api_key_env: ClassVar[str] = "TAVILY_API_KEY"
    base_url: str = "https://api.tavily.com"
    search_depth: Literal["basic", "advanced"] = "basic"
    topic: Literal["general", "news", "finance"] = "general"
    include_domains: list[str] = Field(default_factory=list)
    exclude_domains: list[str] = Field(default_factory=list)


@register_provider
class TavilyProvider(SearchProvider):
    name = "tavily"
    Options = TavilyOptions
    options: TavilyOptions
    max_results_per_request = 20

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        payload: dict[str, Any] = {
            "query": query,
            "max_results": min(max_results, self.max_results_per_request),
            "search_depth": self.options.search_depth,
            "topic": self.options.topic,
            "include_answer": False,
            "include_raw_content": False,
        }
        if self.options.include_domains:
            payload["include_domains"] = self.options.include_domains
        if self.options.exclude_domains:
            payload["exclude_domains"] = self.options.exclude_domains
        headers = {"Authorization": f"Bearer {self.api_key()}"}
        data = self._json(await self.http.request("POST", f"{self.endpoint}/search", json=payload, headers=headers))
        items = data.get("results", []) if isinstance(data, dict) else []
        return self._results(items, title="title", url="url", snippet="content", limit=max_results)
