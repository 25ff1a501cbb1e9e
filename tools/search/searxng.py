"""SearXNG's JSON API (`/search?q=...&format=json`): a real instance, or the sandbox web by default."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from atelier.tools.errors import SearchFailed
from atelier.tools.search.base import ProviderOptions, SearchProvider, SearchResult
from atelier.tools.search.registry import register_provider


class SearxngOptions(ProviderOptions):
    base_url: str | None = Field(default=None, description="A SearXNG instance; unset: the sandbox web.")
    language: str | None = None
    categories: str | None = None
    safesearch: int | None = Field(default=None, ge=0, le=2)
    max_pages: int = Field(default=5, ge=1, description="SearXNG pages a fixed number of results; pages read at most.")


@register_provider
class SearxngProvider(SearchProvider):
    name = "searxng"
    Options = SearxngOptions
    options: SearxngOptions

    def _params(self, query: str, pageno: int) -> dict[str, Any]:
        params: dict[str, Any] = {"q": query, "format": "json", "pageno": pageno}
        for name in ("language", "categories", "safesearch"):
            value = getattr(self.options, name)
            if value is not None:
                params[name] = value
        return params

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        for pageno in range(1, self.options.max_pages + 1):
            data = self._json(
                await self.http.request("GET", f"{self.endpoint}/search", params=self._params(query, pageno))
            )
            page = data.get("results") if isinstance(data, dict) else None
            if not isinstance(page, list):
                raise SearchFailed(f"searxng search: {self.endpoint} answered without a 'results' list")
            fresh = [item for item in page if isinstance(item, dict) and item.get("url") not in seen]
            if not fresh:
                break
            seen.update(str(item.get("url")) for item in fresh)
            items += fresh
            if len(items) >= max_results:
                break
        return self._results(items, title="title", url="url", snippet="content", limit=max_results)
