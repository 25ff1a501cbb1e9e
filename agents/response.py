"""What a system under test returns for a case."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Citation(BaseModel):
    source_id: str
    url: str | None = None
    title: str | None = None


class SystemResponse(BaseModel):
    text: str
    citations: list[Citation] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
