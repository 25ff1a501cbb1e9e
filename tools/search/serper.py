"""Serper (Google results): POST /search with an X-API-KEY header, results in `organic[]`."""

from __future__ import annotations

from typing import Any, ClassVar

from atelier.tools.api_keys import KeyedServiceConfig
from atelier.tools.search.base import SearchProvider, SearchResult
from atelier.tools.search.registry import register_provider


class SerperOptions(KeyedServiceConfig):
    api_key_env: ClassVar[str] = "SERPER_API_KEY"
    base_url: str = "https://google.serper.dev"
    gl: str | None = None  # country
    hl: str | None = None  # interface language


@register_provider
class SerperProvider(SearchProvider):
    name = "serper"
    Options = SerperOptions
    options: SerperOptions
    max_results_per_request = 100

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        payload: dict[str, Any] = {"q": query, "num": min(max_results, self.max_results_per_request)}
        if self.options.gl:
            payload["gl"] = self.options.gl
        if self.options.hl:
            payload["hl"] = self.options.hl
        headers = {"X-API-KEY": self.api_key()}
        data = self._json(await self.http.request("POST", f"{self.endpoint}/search", json=payload, headers=headers))
        items = data.get("organic", []) if isinstance(data, dict) else []
        return self._results(items, title="title", url="link", snippet="snippet", limit=max_results)
