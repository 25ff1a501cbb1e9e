"""What a system under test returns for a case."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from atelier.benchmarks.common.degradation import Degradation


class Citation(BaseModel):
    """A source the response cites. `sha256` is the hash of the exact text the system read
    (UTF-8), so a judge can check claims against what the system saw: web pages stay
    retrievable from the run's web cache, and every read text from the run's source store
    (`graphs.sources.SourceStore`) under that hash."""

    source_id: str
    url: str | None = None
    title: str | None = None
    sha256: str | None = None
    number: int | None = Field(default=None, description="The [n] that cites it in the response text.")


class SystemResponse(BaseModel):
    text: str
    citations: list[Citation] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
    degraded: list[Degradation] = Field(
        default_factory=list, description="Steps of the system that fell back (benchmarks.common.degradation)."
    )
