"""Web text in prompts: pages and search results as untrusted `Section`s of the one prompt builder.

`agents.prompts.build_messages` fences an untrusted section as data and tells the model, in the
system message, not to follow instructions found inside it; these helpers decide what of a
page or a result list goes into the section, and neutralise whatever in it a model could read as
the fence's end.
"""

from __future__ import annotations

import re

from agents.prompts import Section
from tools.page import Page
from tools.search.base import SearchResult

TRUNCATION_MARK = " [...truncated]"

# Whatever a model could read as `</data>`: any case, spaces or invisible characters anywhere in
# the tag (`< /data>`, `</ data >`, `</d\u200bata>`), attributes or a self-closing slash
# (`</data foo>`, `</data/>`), a backslash for the slash, full-width and other look-alikes of `<`,
# `/` and the letters, and no `>` at all (`</data` at the very end, just before the real closing tag).
_GAP = r"[\s\u00ad\u034f\u180e\u200b-\u200f\u2060-\u2064\ufeff]*"  # spaces, invisible characters
_OPENING = "[<\uff1c\ufe64\u2039\u3008\u27e8]"  # < and full-width, small, single-quote, angle brackets
_SLASH = "[/\\\\\uff0f\u2044\u2215]"  # slash, backslash, full-width, fraction and division slashes
_NAME = _GAP.join(f"[{letter}{chr(ord(letter) + 0xFEE0)}]" for letter in "data")  # ASCII or full-width
_FENCE_CLOSER = re.compile(_OPENING + _GAP + _SLASH + _GAP + _NAME + r"(?!\w)", re.IGNORECASE)
NEUTRALISED_OPENER = "&lt;"  # what replaces the `<` of a fence closer: shown, never read as a tag


def neutralise_fence_closers(text: str) -> str:
    """`text` with every look-alike of the data fence's closing tag made inert (its `<` escaped)."""
    return _FENCE_CLOSER.sub(lambda match: NEUTRALISED_OPENER + match.group(0)[1:], text)


def _clip(text: str, max_chars: int | None) -> str:
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars] + TRUNCATION_MARK


def page_section(page: Page, *, max_chars: int | None = None) -> Section:
    """A fetched page, ready for `build_messages` (or `.render()` for a plain string)."""
    body = f"Title: {page.title}\nURL: {page.url}\n\n{_clip(page.text, max_chars)}"
    return Section(title=f"Web page: {page.url}", body=neutralise_fence_closers(body), untrusted=True)


def search_results_section(results: list[SearchResult], *, max_snippet_chars: int = 500) -> Section:
    """Search results (their titles and snippets are written by the web too)."""
    body = "\n\n".join(
        f"[{result.rank}] {result.title}\nURL: {result.url}\n{_clip(result.snippet, max_snippet_chars)}"
        for result in results
    )
    return Section(title="Web search results", body=neutralise_fence_closers(body), untrusted=True)
