"""The `direct` reader: GET the page ourselves (guarded httpx) and extract its main text (trafilatura).

With the sandbox web, a document's citable URL (https://en.wikipedia.org/wiki/...) is fetched from
the sandbox's `/mirror` route on loopback; the page keeps the citable URL and records where it was
served from in `metadata["served_from"]`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
from pydantic import Field

from atelier.tools.errors import WebError
from atelier.tools.extract import parse_content_type
from atelier.tools.extraction_pool import default_workers, extract_text_async
from atelier.tools.http import HttpResponse
from atelier.tools.page import Page
from atelier.tools.readers.base import PageReader, ReaderOptions, require_success
from atelier.tools.readers.registry import register_reader

ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,text/markdown;q=0.8"


class DirectOptions(ReaderOptions):
    extract_workers: int | None = Field(
        default=None,
        ge=0,
        description="Processes extracting main text in parallel (0: a thread; unset: one per core when there are several).",
    )


@register_reader
class DirectReader(PageReader):
    name = "direct"
    Options = DirectOptions
    options: DirectOptions

    def options_identity(self) -> dict[str, Any]:
        return {k: v for k, v in super().options_identity().items() if k != "extract_workers"}  # speed, not answers

    async def download(self, url: str) -> HttpResponse:
        if self.route is None:
            return await self.http.request("GET", url, headers={"Accept": ACCEPT})
        # the sandbox answers for every URL, so refuse here what the real web would refuse
        self.http.guard.check_static(httpx.URL(url))
        routed = self.route(url)
        try:
            return await self.http.request("GET", routed, headers={"Accept": ACCEPT})
        except WebError as exc:  # said of the URL asked for: the sandbox's own address is no source
            raise type(exc)(str(exc).replace(routed, f"{url} (from the {self.origin} web)")) from None

    async def read_page(self, url: str, response: HttpResponse, *, fetched_at: datetime, from_cache: bool) -> Page:
        require_success(url, response, served_by=self.origin if self.route is not None else None)
        workers = self.options.extract_workers
        extracted = await extract_text_async(
            response.body, response.content_type, url, default_workers() if workers is None else workers
        )
        routed = response.url != url
        return Page(
            url=url,
            final_url=url if routed and not response.redirects else response.final_url,
            status=response.status,
            content_type=parse_content_type(response.content_type)[0],
            title=extracted.title,
            text=extracted.text,
            metadata={**extracted.metadata, "charset": extracted.charset, "served_from": response.final_url},
            fetched_at=fetched_at,
            from_cache=from_cache,
        )
