"""The normal form URLs are compared in: cache keys and the sandbox's lookup by citable URL."""

from __future__ import annotations

import functools
import hashlib

import httpx


@functools.lru_cache(maxsize=16_384)  # httpx parses a URL in ~0.2 ms; a run asks for the same few again and again
def canonical_url(url: str) -> str:
    """httpx normalisation (scheme and host case, percent-encoding, default port) without the fragment."""
    return str(httpx.URL(url).copy_with(fragment=None))


def web_source_id(url: str) -> str:
    """The stable id of the web source at `url`, wherever a system read it."""
    return "w-" + hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]
