"""Citations checked in code, not left to the prompt.

A writer is shown its sources numbered `[1]..[N]` and asked to cite them by number.
`check_citations` then reads what it wrote: every marker that names a source it was shown is
kept (renumbered by first use, so the list has no holes); any other number — a source that was
never read — is removed and counted, never kept. A sources section the model wrote itself is
replaced by the list built from the sources actually read, with the sha256 of each text.
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

from pydantic import BaseModel, Field

from agents.response import Citation

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


# [3], [1, 4], [2-5], [2–5]; not [^1] footnotes or [a] labels
_MARKER = re.compile(r"\s?\[(\d+(?:\s*(?:[,;]|[-–])\s*\d+)*)\]")
_RANGE = re.compile(r"(\d+)\s*[-–]\s*(\d+)")
# a heading or bold/colon label that opens a model-written source list
_SOURCES_HEADING = re.compile(
    r"^[ \t]{0,3}(?:#{1,6}[ \t]*|\*\*)?(?:sources|references|bibliography|works cited|citations)\b[^\n]*$",
    re.IGNORECASE | re.MULTILINE,
)
_MAX_RANGE = 50  # "[1-9999]" is not a citation of 9999 sources


def _numbers(group: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r"\s*[,;]\s*", group):
        span = _RANGE.fullmatch(part)
        if span:
            low, high = int(span.group(1)), int(span.group(2))
            out.extend(range(low, high + 1) if 0 <= high - low <= _MAX_RANGE else [low, high])
        elif part.strip():
            out.append(int(part))
    return out


def source_line(number: int, source: SourceRef) -> str:
    where = source.url or "gold information provided with the task"
    return f"[{number}] {source.title or source.id}. {where}"


def check_citations(text: str, shown: Sequence[SourceRef], *, heading: str = "Sources") -> CitationReport:
    """Keep the markers that name a source in `shown` (`shown[i]` was presented as `[i+1]`),
    drop the rest, renumber by first use and end the text with the list of cited sources."""
    body = text.rstrip()
    own_list = list(_SOURCES_HEADING.finditer(body))
    if own_list:
        body = body[: own_list[-1].start()].rstrip()

    renumber: dict[int, int] = {}
    unresolved: list[int] = []
    markers = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal markers
        kept = []
        for number in _numbers(match.group(1)):
            markers += 1
            if 1 <= number <= len(shown):
                renumber.setdefault(number, len(renumber) + 1)
                kept.append(renumber[number])
            else:
                unresolved.append(number)
        if not kept:
            return ""
        space = " " if match.group(0)[0].isspace() else ""
        return space + "[" + ", ".join(str(n) for n in dict.fromkeys(kept)) + "]"

    body = _MARKER.sub(replace, body)
    cited = sorted(renumber.items(), key=lambda item: item[1])
    citations = [
        Citation(source_id=shown[old - 1].id, url=shown[old - 1].url, title=shown[old - 1].title,
                 sha256=shown[old - 1].sha256, number=new)
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
    }
    return CitationReport(text=body, citations=citations, stats=stats)
