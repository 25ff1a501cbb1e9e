"""The page-reader interface: download a URL (network) and turn the stored response into a Page.

The two halves are apart so the web cache sits between them: a replayed response goes through
exactly the same `read_page` as a live one, so a replayed page is the recorded page.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from atelier.tools.errors import FetchFailed
from atelier.tools.http import GuardedHttp, HttpResponse
from atelier.tools.page import Page
from atelier.tools.service import WebService


class ReaderOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PageReader(WebService, ABC):
    def __init__(
        self, options: BaseModel, http: GuardedHttp, *, route: Callable[[str], str] | None = None, origin: str = "web"
    ) -> None:
        """`route` maps a URL to the one actually requested (the sandbox mirror); `origin` names the web
        being read ("web", or "sandbox:<corpus>"), so pages of different webs never share a cache key."""
        super().__init__(options, http)
        self.route = route
        self.origin = origin

    @abstractmethod
    async def download(self, url: str) -> HttpResponse: ...

    @abstractmethod
    async def read_page(self, url: str, response: HttpResponse, *, fetched_at: datetime, from_cache: bool) -> Page:
        """The page in a downloaded response; depends on nothing but its arguments."""

    def identity(self) -> dict[str, Any]:
        return {"reader": self.name, "origin": self.origin, "options": self.options_identity()}


def require_success(url: str, response: HttpResponse, *, served_by: str | None = None) -> None:
    """A page's response was a success, else `FetchFailed`: its status and where it came from (the
    URL that answered, or `served_by`: the web that serves `url`, the sandbox's, whose own address
    is no source to cite)."""
    if not 200 <= response.status < 300:
        source = f"the {served_by} web" if served_by else response.final_url
        raise FetchFailed(f"{url}: HTTP {response.status} from {source}")
