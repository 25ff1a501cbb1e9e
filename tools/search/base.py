"""The search interface every provider implements, and the result it returns."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from atelier.tools.errors import SearchFailed
from atelier.tools.http import GuardedHttp, HttpResponse
from atelier.tools.service import WebService


class SearchResult(BaseModel):
    title: str
    url: str
    snippet: str = ""
    provider: str
    rank: int = Field(ge=1, description="1 = first result.")
    raw: dict[str, Any] = Field(default_factory=dict, description="The provider's own record, untouched.")


class ProviderOptions(BaseModel):
    """Options of a provider without an API key; providers with one use KeyedServiceConfig."""

    model_config = ConfigDict(extra="forbid")


class SearchProvider(WebService, ABC):
    """A search engine reached over HTTP. Subclasses set `name` and `Options` and register themselves."""

    max_results_per_request: ClassVar[int] = 20

    def __init__(
        self, options: BaseModel, http: GuardedHttp, *, endpoint: str | None = None, endpoint_label: str | None = None
    ) -> None:
        """`endpoint` replaces the configured base URL and `endpoint_label` names it in cache keys:
        the sandbox web passes its loopback URL and a label that does not depend on the port."""
        super().__init__(options, http)
        self.endpoint = (endpoint or getattr(options, "base_url", None) or "").rstrip("/")
        self.endpoint_label = endpoint_label or self.endpoint

    def identity(self) -> dict[str, Any]:
        """What makes two searches the same search, for the web cache. Never includes secrets."""
        return {"provider": self.name, "endpoint": self.endpoint_label, "options": self.options_identity()}

    @abstractmethod
    async def search(self, query: str, max_results: int) -> list[SearchResult]: ...

    def _json(self, response: HttpResponse) -> Any:
        """The parsed JSON body of a successful response, or SearchFailed naming the provider."""
        if not 200 <= response.status < 300:
            excerpt = response.body[:300].decode("utf-8", errors="replace")
            raise SearchFailed(
                f"{self.name} search failed: HTTP {response.status} from {response.final_url}: {excerpt}"
            )
        try:
            return json.loads(response.body)
        except ValueError as exc:
            raise SearchFailed(f"{self.name} search: {response.final_url} did not answer JSON ({exc})") from None

    def _results(
        self, items: list[dict[str, Any]], *, title: str, url: str, snippet: str, limit: int
    ) -> list[SearchResult]:
        """Map provider records to SearchResults; records without a URL are skipped."""
        results: list[SearchResult] = []
        for item in items:
            if not isinstance(item, dict) or not item.get(url):
                continue
            results.append(
                SearchResult(
                    title=str(item.get(title) or ""),
                    url=str(item[url]),
                    snippet=str(item.get(snippet) or ""),
                    provider=self.name,
                    rank=len(results) + 1,
                    raw=item,
                )
            )
            if len(results) == limit:
                break
        return results
