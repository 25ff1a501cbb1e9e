"""Citations checked in code, not left to the prompt.

A writer is shown its sources numbered `[1]..[N]` and asked to cite them by number.
`check_citations` then reads what it wrote and changes only citation markers and, at the very end,
a source list the model wrote itself. Prose is never removed.

Markers: `[3]`, `[1, 4]`, `[2-5]`, and the "Source N" forms `[Source 1]`, `[source 2, 3]`,
`[Sources 1-2]`, `[Source: 1]`, `(Source 1)`. Every number that names a source it was shown is kept,
renumbered by first use (so the list has no holes) and written in the canonical form `[n]`; any
other number (a source that was never read) is removed and counted, never kept. A marker written as
a link, `[1](https://...)`, becomes the plain `[1]`: the URL the model wrote is dropped, since the
list at the end gives the URL actually read; if its number names no source read, the whole link is
removed and counted like any unresolved marker.

A URL the text names that is no source it was shown — an ordinary link `[text](url)`, an image
`![alt](url)` or a bare `https://...` — is one a page (or the model) planted, such as a tracking
link: the link keeps its text, the URL goes, and each is counted (`urls_removed`); the list at the
end names the URLs actually read.

Left as written: `[^1]` footnotes, `[a]` labels, and bracketed years:
a bare `[2023]` or `[2019-2021]` whose numbers are all in 1900..2100 and none names a shown source
(with 1950 sources shown, `[1950]` is a citation and `[1999]` a year; in a "Source N" form a number
is always a citation).

The model's own source list is replaced only when it ends the text: a heading or label line alone
on its line (`## Sources`, `**References:**`, `Sources:`, `Works cited`, ...) followed, up to the end
of the text, only by blank lines and list entries (`[1] Title. URL`, `1. ...`, `- ...`, `* ...`, a
bare URL, or an indented continuation of an entry). An entry that itself cites a marker (`- Fares
rose [2].`) is prose, not a list entry. A line that merely starts with "Sources ..." is prose, and so
is a "Sources" heading followed by a paragraph or by more sections. The text then ends with the list
built from the sources actually cited, with the sha256 of each text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from atelier.agents.response import Citation

SourceKind = Literal["web", "gold"]


class SourceRef(BaseModel):
    """A text a system read: a fetched page, or an item of gold information. Graph state keeps
    this reference only; the text is stored once under its sha256."""

    id: str = Field(description="Stable id: a hash of the page URL, or of the gold item's text.")
    kind: SourceKind = "web"
    url: str | None = None
    title: str = ""
    sha256: str = Field(description="sha256 of the text read (UTF-8).")
    chars: int = 0


class CitationReport(BaseModel):
    text: str
    citations: list[Citation]
    stats: dict[str, object]


# numbers inside one marker: 3 | 1, 4 | 2-5 | 2–5
_NUMBERS = r"\d+(?:\s*(?:[,;]|[-–])\s*\d+)*"
# a link target written right after a marker, `[1](https://...)`: it must look like a URL, so that
# `[1](2019)` keeps its parenthesis as text; one level of parentheses inside it, as in Wikipedia URLs
_LINK = r"\((?:[a-zA-Z][a-zA-Z0-9+.-]*:|www\.|/|#)(?:[^()\s]|\([^()\s]*\))*\)"
_SOURCE_WORD = r"sources?\s*#?\s*:?\s*"
# horizontal space only, so that removing a marker never joins two lines
_MARKER = re.compile(
    rf"(?P<space>[ \t]?)(?:"
    rf"\[(?P<bare>{_NUMBERS})\](?P<bare_link>{_LINK})?"
    rf"|\[\s*{_SOURCE_WORD}(?P<named>{_NUMBERS})\s*\](?P<named_link>{_LINK})?"
    rf"|\(\s*{_SOURCE_WORD}(?P<paren>{_NUMBERS})\s*\)"
    rf")",
    re.IGNORECASE,
)
_RANGE = re.compile(r"(\d+)\s*[-–]\s*(\d+)")
_MAX_RANGE = 50  # "[1-9999]" is not a citation of 9999 sources
_YEARS = range(1900, 2101)

# a line that is only the label of a source list: `## Sources`, `**References:**`, `Sources:`, ...
_LIST_HEADING = re.compile(
    r"[ \t]{0,3}(?:#{1,6}[ \t]*)?(?P<emphasis>\*\*|__|\*|_)?[ \t]*"
    r"(?:sources?|references?|bibliography|works[ \t]+cited|citations?)"
    r"(?:[ \t]+(?:used|cited|consulted))?[ \t]*:?[ \t]*(?P=emphasis)?[ \t]*:?[ \t]*",
    re.IGNORECASE,
)
# an entry of a source list: `[1] Title. URL`, `[^1]: ...`, `1. ...`, `1) ...`, `- ...`, `* ...`, a bare URL
_LIST_ENTRY = re.compile(r"[ \t]*(?:\[\^?\d+\]|\d+[.)](?=[ \t]|$)|[-*+•](?=[ \t]|$)|<?(?:https?://|www\.)\S+>?[ \t]*$)")
_CONTINUATION = re.compile(r"(?: {2,}|\t)\S")  # an indented line continuing the entry above
_INLINE_MARKER = re.compile(r"\S[ \t]*\[\d+(?:\s*[,;–-]\s*\d+)*\]")  # a citation after the entry's start


def _parts(group: str) -> list[tuple[str, list[int]]]:
    """The comma-separated parts of a marker, each with the numbers it names."""
    out: list[tuple[str, list[int]]] = []
    for part in re.split(r"\s*[,;]\s*", group.strip()):
        span = _RANGE.fullmatch(part)
        if span:
            low, high = int(span.group(1)), int(span.group(2))
            numbers = list(range(low, high + 1)) if 0 <= high - low <= _MAX_RANGE else [low, high]
            out.append((part, numbers))
        elif part:
            out.append((part, [int(part)]))
    return out


def _is_list_tail(lines: Sequence[str]) -> bool:
    """Whether these lines, the rest of the text after a list heading, are only a source list."""
    in_entry = False
    for line in (raw.rstrip() for raw in lines):
        if not line:
            continue
        if _LIST_HEADING.fullmatch(line):
            in_entry = False
        elif _LIST_ENTRY.match(line) and not _INLINE_MARKER.search(_LIST_ENTRY.sub("", line, count=1)):
            in_entry = True
        elif not (in_entry and _CONTINUATION.match(line) and not _INLINE_MARKER.search(line)):
            return False
    return True


def split_own_source_list(text: str) -> tuple[str, str]:
    """`text` split into its body and the source list the model wrote at its very end ("" if none)."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if _LIST_HEADING.fullmatch(line.rstrip()) and _is_list_tail(lines[index + 1 :]):
            return "\n".join(lines[:index]).rstrip(), "\n".join(lines[index:])
    return text, ""


_MARKDOWN_LINK = re.compile(
    r"(?P<image>!?)\[(?P<label>[^\]\n]*)\]"
    r"\((?P<url>(?:[a-z][a-z0-9+.-]*:|//|www\.)[^()\s]*(?:\([^()\s]*\))?[^()\s]*)(?:\s+\"[^\"]*\")?\)",
    re.IGNORECASE,
)
_BARE_URL = re.compile(r"(?<![\w(/])(?:https?://|www\.)[^\s<>\"'`\]\[)]+", re.IGNORECASE)
_URL_TAIL = ".,;:!?"  # punctuation a sentence puts after a URL, not part of it


def _known(url: str, read: set[str]) -> bool:
    return url in read or url.rstrip("/") in {r.rstrip("/") for r in read}


def _drop_unread_urls(text: str, read: set[str]) -> tuple[str, list[str]]:
    """`text` without the URLs that name no source read (a link keeps its text); the URLs removed."""
    removed: list[str] = []

    def link(match: re.Match[str]) -> str:
        url = match.group("url")
        if _known(url, read):
            return match.group(0)
        removed.append(url)
        return match.group("label")

    def bare(match: re.Match[str]) -> str:
        url = match.group(0)
        stripped = url.rstrip(_URL_TAIL)
        if _known(stripped, read):
            return url
        removed.append(stripped)
        return url[len(stripped) :]

    return _BARE_URL.sub(bare, _MARKDOWN_LINK.sub(link, text)), removed


def source_line(number: int, source: SourceRef) -> str:
    where = source.url or "gold information provided with the task"
    return f"[{number}] {source.title or source.id}. {where}"


def check_citations(text: str, shown: Sequence[SourceRef], *, heading: str = "Sources") -> CitationReport:
    """Keep the markers that name a source in `shown` (`shown[i]` was presented as `[i+1]`),
    drop the rest, renumber by first use and end the text with the list of cited sources."""
    body, own_list = split_own_source_list(text.rstrip())

    renumber: dict[int, int] = {}
    unresolved: list[int] = []
    markers = 0
    link_urls_dropped = 0
    years_left = 0

    def is_year_part(numbers: list[int]) -> bool:
        return all(n in _YEARS and not 1 <= n <= len(shown) for n in numbers)

    def replace(match: re.Match[str]) -> str:
        nonlocal markers, link_urls_dropped, years_left
        bare = match.group("bare")
        group = bare or match.group("named") or match.group("paren")
        link = match.group("bare_link") or match.group("named_link")
        parts = _parts(group)
        kept: list[int] = []
        years: list[str] = []
        for part, numbers in parts:
            if bare is not None and is_year_part(numbers):
                years.append(part)
                continue
            for number in numbers:
                markers += 1
                if 1 <= number <= len(shown):
                    renumber.setdefault(number, len(renumber) + 1)
                    kept.append(renumber[number])
                else:
                    unresolved.append(number)
        years_left += len(years)
        if len(years) == len(parts):
            return match.group(0)  # a bracketed year (or a link whose text is one): not a citation
        if link:
            link_urls_dropped += 1
        written = []
        if kept:
            written.append("[" + ", ".join(str(n) for n in dict.fromkeys(kept)) + "]")
        if years:
            written.append("[" + ", ".join(years) + "]")
        return match.group("space") + " ".join(written) if written else ""

    body = _MARKER.sub(replace, body)
    body, urls_removed = _drop_unread_urls(body, {s.url for s in shown if s.url})
    cited = sorted(renumber.items(), key=lambda item: item[1])
    citations = [
        Citation(
            source_id=shown[old - 1].id,
            url=shown[old - 1].url,
            title=shown[old - 1].title,
            sha256=shown[old - 1].sha256,
            number=new,
        )
        for old, new in cited
    ]
    if citations:
        lines = [source_line(new, shown[old - 1]) for old, new in cited]
        body = f"{body}\n\n## {heading}\n" + "\n".join(lines)
    stats: dict[str, object] = {
        "markers": markers,
        "resolved": markers - len(unresolved),
        "unresolved_removed": len(unresolved),
        "unresolved_numbers": sorted(set(unresolved)),
        "sources_read": len(shown),
        "sources_cited": len(citations),
        "model_source_list_removed": bool(own_list),
        "link_urls_dropped": link_urls_dropped,
        "years_left": years_left,
        "urls_removed": len(urls_removed),
        "removed_urls": urls_removed[:10],
    }
    return CitationReport(text=body, citations=citations, stats=stats)
