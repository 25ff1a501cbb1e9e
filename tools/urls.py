"""The normal form URLs are compared in: cache keys and the sandbox's lookup by citable URL."""

from __future__ import annotations

import httpx


def canonical_url(url: str) -> str:
    """httpx normalisation (scheme and host case, percent-encoding, default port) without the fragment."""
    return str(httpx.URL(url).copy_with(fragment=None))
