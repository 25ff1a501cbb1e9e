"""`Page`: what a fetch returns, whichever reader produced it and whether it came from the cache."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class Page(BaseModel):
    url: str = Field(description="The URL asked for: the one to cite.")
    final_url: str = Field(description="Where the content came from after redirects, in the URL space of `url`.")
    status: int
    content_type: str
    title: str
    text: str = Field(description="Main text only. Untrusted: wrap it with tools.untrusted before a prompt.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    fetched_at: datetime = Field(description="When the response was first received (its recording time on replay).")
    from_cache: bool = False
