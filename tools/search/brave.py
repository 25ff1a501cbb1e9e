"""Brave Search API: GET /res/v1/web/search with X-Subscription-Token, results in `web.results[]`."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from atelier.tools.api_keys import KeyedServiceConfig
from atelier.tools.search.base import SearchProvider, SearchResult
from atelier.tools.search.registry import register_provider


class BraveOptions(KeyedServiceConfig):
    api_key_env: ClassVar[str] = "BRAVE_API_KEY"
    base_url: str = "https://api.search.brave.com"
    country: str | None = None
    search_lang: str | None = None
    safesearch: Literal["off", "moderate", "strict"] | None = None


@register_provider
class BraveProvider(SearchProvider):
    name = "brave"
    Options = BraveOptions
    options: BraveOptions
    max_results_per_request = 20

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        params: dict[str, Any] = {
            "q": query,
            "count": min(max_results, self.max_results_per_request),
            "text_decorations": "false",  # plain snippets, no <strong> highlighting
        }
        for name in ("country", "search_lang", "safesearch"):
            value = getattr(self.options, name)
            if value is not None:
                params[name] = value
        headers = {"X-Subscription-Token": self.api_key(), "Accept": "application/json"}
        data = self._json(
            await self.http.request("GET", f"{self.endpoint}/res/v1/web/search", params=params, headers=headers)
        )
        web = data.get("web", {}) if isinstance(data, dict) else {}
        items = web.get("results", []) if isinstance(web, dict) else []
        return self._results(items, title="title", url="url", snippet="description", limit=max_results)
