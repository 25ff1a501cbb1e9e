"""The `jina` reader: Jina Reader (GET https://r.jina.ai/<url>, JSON mode) fetches and converts the page.

The page is fetched by Jina's servers, so only the checks that need no DNS apply to it here
(scheme, literal private addresses, the allow-list); the request to Jina itself is fully guarded.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import ClassVar, Literal

import httpx

from atelier.tools.api_keys import KeyedServiceConfig
from atelier.tools.errors import FetchFailed
from atelier.tools.http import HttpResponse
from atelier.tools.page import Page
from atelier.tools.readers.base import PageReader, require_success
from atelier.tools.readers.registry import register_reader


class JinaOptions(KeyedServiceConfig):
    api_key_env: ClassVar[str] = "JINA_API_KEY"
    base_url: str = "https://r.jina.ai"
    return_format: Literal["markdown", "text", "html"] = "markdown"


_CONTENT_TYPES = {"markdown": "text/markdown", "text": "text/plain", "html": "text/html"}


@register_reader
class JinaReader(PageReader):
    name = "jina"
    Options = JinaOptions
    options: JinaOptions

    async def download(self, url: str) -> HttpResponse:
        self.http.guard.check_static(httpx.URL(url))
        headers = {
            "Accept": "application/json",
            "Authorization": f"Bearer {self.api_key()}",
            "X-Return-Format": self.options.return_format,
        }
        return await self.http.request("GET", f"{self.options.base_url.rstrip('/')}/{url}", headers=headers)

    async def read_page(self, url: str, response: HttpResponse, *, fetched_at: datetime, from_cache: bool) -> Page:
        require_success(url, response)
        try:
            data = json.loads(response.body)["data"]
            title, text = str(data.get("title") or ""), str(data["content"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FetchFailed(f"{url}: Jina Reader answered without data.content ({exc!r})") from None
        metadata = {key: data[key] for key in ("description", "publishedTime") if data.get(key)}
        return Page(
            url=url,
            final_url=str(data.get("url") or url),
            status=response.status,
            content_type=_CONTENT_TYPES[self.options.return_format],
            title=title,
            text=text,
            metadata={**metadata, "reader": "jina"},
            fetched_at=fetched_at,
            from_cache=from_cache,
        )
