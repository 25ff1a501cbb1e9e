"""The routes of the sandbox web and the URLs built on them (shared by the server and its clients)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

SEARCH_PATH = "/search"  # SearXNG-compatible: ?q=...&format=json&pageno=N
DOC_PATH = "/doc/"  # /doc/<id>: one HTML page per document
MIRROR_PATH = "/mirror"  # ?url=<a document's own URL>: the same page, found by its citable URL
HEALTH_PATH = "/healthz"


def doc_url(base_url: str, doc_id: str) -> str:
    return f"{base_url.rstrip('/')}{DOC_PATH}{quote(doc_id, safe='')}"


def mirror_url(base_url: str, url: str) -> str:
    """Where the sandbox serves the document whose citable URL is `url` (404 if it has none)."""
    base = base_url.rstrip("/")
    if url.startswith(base + "/"):  # already a sandbox URL
        return url
    return f"{base}{MIRROR_PATH}?{urlencode({'url': url})}"
