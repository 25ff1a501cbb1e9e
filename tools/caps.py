"""Caps on every outbound web request: body size, redirects and time."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FetchCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int = Field(default=5_000_000, gt=0, description="Largest body read; the stream is cut past it.")
    max_redirects: int = Field(default=5, ge=0, description="Redirects followed (each re-checked by the URL guard).")
    timeout_s: float = Field(
        default=20.0, gt=0, description="Total time for one request, every redirect hop and the body included."
    )
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=32, gt=0, description="Size of the shared connection pool.")
