"""The pieces of a case as the reading page shows them: a response rendered from its markdown with
each citation marker `[n]` a button that shows the cited source's text (the text the system read,
from the run's source store), and two systems' responses diffed word by word (difflib, server-side:
the page needs no script library).
"""

from __future__ import annotations

import difflib
import html
import re
from pathlib import Path
from typing import Any

from markupsafe import Markup

from atelier.graphs.sources import SOURCES_DIR, SourceStore

SOURCE_CHARS = 2_400  # of a source's text, what its popover shows (the rest is said to exist)
_TAG = re.compile(r"(<[^>]*>)")
_MARKER = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def source_anchor(sha: str) -> str:
    return f"src-{sha[:16]}"


class SourceTexts:
    """The texts a run's systems read, by sha256 (the run folder's `sources/`), each once per page."""

    def __init__(self, run_dir: str | Path | None) -> None:
        self.store = SourceStore(Path(run_dir) / SOURCES_DIR) if run_dir else None
        self.used: dict[str, dict[str, Any]] = {}  # anchor -> {title, url, text, more}

    def anchor(self, sha: str | None, title: str | None = None, url: str | None = None) -> str | None:
        """The page id of the source's text (None when the run does not hold it)."""
        if not sha or self.store is None:
            return None
        key = source_anchor(sha)
        if key not in self.used:
            try:
                text = self.store.get(sha)
            except (LookupError, OSError):
                return None
            self.used[key] = {
                "title": title or url or sha[:12],
                "url": url,
                "text": text[:SOURCE_CHARS],
                "more": max(0, len(text) - SOURCE_CHARS),
            }
        return key


def render_markdown(text: str) -> str:
    """Markdown as HTML, raw HTML in it escaped (a response is untrusted text)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(text)


def response_html(text: str, citations: list[dict[str, Any]], sources: SourceTexts) -> Markup:
    """The response as HTML; each `[n]` (or `[n, m]`) whose number a citation carries becomes a
    button naming its source, holding the id of the source's text (`data-source`)."""
    by_number: dict[int, dict[str, Any]] = {}
    for citation in citations:
        if citation.get("number") is not None:
            by_number[int(citation["number"])] = citation

    def marker(match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.split(r"\s*[,;]\s*", match.group(1))]
        if not all(n in by_number for n in numbers):
            return match.group(0)
        buttons = []
        for n in numbers:
            c = by_number[n]
            anchor = sources.anchor(c.get("sha256"), c.get("title"), c.get("url"))
            label = html.escape(c.get("title") or c.get("url") or c.get("source_id") or "", quote=True)
            target = f' data-source="{anchor}"' if anchor else ""
            buttons.append(f'<button type="button" class="cite" title="{label}"{target}>{n}</button>')
        return "[" + ",".join(buttons) + "]"

    parts = _TAG.split(render_markdown(text))
    inside_code = 0
    for i, part in enumerate(parts):
        if part.startswith("<"):
            if part.startswith(("<code", "<pre")):
                inside_code += 1
            elif part.startswith(("</code", "</pre")):
                inside_code = max(0, inside_code - 1)
            continue
        if not inside_code:
            parts[i] = _MARKER.sub(marker, part)
    return Markup("".join(parts))


def word_diff(before: str, after: str) -> Markup:
    """`after` against `before`, word by word: removed words in `<del>`, added ones in `<ins>`."""
    a, b = _TOKEN.findall(before), _TOKEN.findall(after)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            out.append(f"<del>{html.escape(''.join(a[i1:i2]))}</del>")
        if op in ("replace", "insert"):
            out.append(f"<ins>{html.escape(''.join(b[j1:j2]))}</ins>")
        if op == "equal":
            out.append(html.escape("".join(a[i1:i2])))
    return Markup("".join(out))


def diff_share(before: str, after: str) -> float:
    """How much of the two texts is the same, word by word (difflib's ratio, 0-1)."""
    return difflib.SequenceMatcher(None, _TOKEN.findall(before), _TOKEN.findall(after), autojunk=False).ratio()
