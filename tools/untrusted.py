"""Web text in prompts: pages and search results as untrusted `Section`s of the one prompt builder.

`agents.prompts.build_messages` fences an untrusted section as data and tells the model, in the
system message, not to follow instructions found inside it; these helpers decide what of a
page or a result list goes into the section, and neutralise whatever in it a model could read as
the fence's end (`agents.prompts.neutralise_fence_closers`, which every untrusted section gets
again when rendered).
"""

from __future__ import annotations

from atelier.agents.prompts import Section, neutralise_fence_closers
from atelier.tools.page import Page
from atelier.tools.search.base import SearchResult

TRUNCATION_MARK = " [...truncated]"


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
