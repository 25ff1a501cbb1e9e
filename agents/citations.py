"""Citations checked in code, not left to the prompt.

A writer is shown its sources numbered `[1]..[N]` and asked to cite them by number.
`check_citations` then reads what it wrote and changes only citation markers and the source lists
the model wrote itself. Prose is never removed, and code is never touched: fenced and indented code
blocks and inline code spans are left exactly as written (`arr[12]` is an index, not a citation).

Markers, every bracket form a model writes for a citation: `[3]`, `[ 3 ]`, `[1, 4]`, `[1 and 4]`,
`[2-5]`, `[^3]` (a footnote reference), `【3】` and `【3†L1-L9】`, the "Source N" forms
`[Source 1]`, `[source 2, 3]`, `[Sources 1-2]`, `[Source: 1]`, `[Ref 2]`, `(Source 1)`, and a marker
written as a link, `[1](https://...)`. Every number that names a source it was shown is kept,
renumbered by first use (so the list has no holes) and written in the canonical form `[n]`: no
marker is left in another form, so none can point at another source after renumbering. Any other
number (a source never read) is removed and counted, never kept. A link's URL is dropped, since the
list at the end gives the URL actually read. What looks like a citation but names no number this
parser can read (`[3a]`, `[1.2]`) is left as written and counted (`unparsed_markers`).

A URL the text names that is no source it was shown — an ordinary link `[text](url)`, an image
`![alt](url)` or a bare `https://...` outside code — is one a page (or the model) planted, such as
a tracking link: the link keeps its text, the URL goes, and each is counted (`urls_removed`); the
list at the end names the URLs actually read.

Left as written: `[a]` labels, bracketed years (a bare `[2023]` or
`[2019-2021]` whose numbers are all in 1900..2100 and none names a shown source; with 1950 sources
shown `[1950]` is a citation; in a "Source N" form a number is always a citation), and footnotes
that are footnotes: a `[^n]` whose definition `[^n]: ...` stays in the text as prose.

The model's own source list is removed wherever it stands, when it is a list of sources: a heading
or label line alone on its line (`## Sources`, `**References:**`, `Sources:`, `Works cited`, ...),
or none at the very end, followed by list entries (`[1] Title. URL`, `[^1]: ...`, `1. ...`,
`- ...`, a bare URL, indented continuations) each of which names a source — a URL or a web domain,
a bracketed number label, a DOI, or the title of a source shown. A heading alone is no proof: a
`## Sources` section whose entries are content ("- Protein sources: beans, lentils and tofu") is
prose and kept, and so is an entry that cites a marker (`- Fares rose [2].`). What follows a
removed list ("Hope this helps!") is kept. The URLs a removed list named that the run never read
are counted (`model_list_unread_urls`). The text then ends with one list, built from the sources
actually cited, with the sha256 of each text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

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


# numbers inside one marker: 3 | 1, 4 | 1 and 4 | 2-5 | 2–5
_SEPARATOR = r"\s*(?:[,;]\s*(?:and\s+|&\s*)?|and\s+|&\s*|[-–—]\s*)"
_NUMBERS = rf"\d+(?:{_SEPARATOR}\d+)*"
# a link target written right after a marker, `[1](https://...)`: it must look like a URL, so that
# `[1](2019)` keeps its parenthesis as text; one level of parentheses inside it, as in Wikipedia URLs
_LINK = r"\((?:[a-zA-Z][a-zA-Z0-9+.-]*:|www\.|/|#)(?:[^()\s]|\([^()\s]*\))*\)"
_SOURCE_WORD = r"(?:sources?|refs?\.?|references?|citations?)\s*#?\s*:?\s*"
# horizontal space only, so that removing a marker never joins two lines
_MARKER = re.compile(
    rf"(?P<space>[ \t]?)(?:"
    rf"\[[ \t]*(?P<bare>{_NUMBERS})[ \t]*\](?P<bare_link>{_LINK})?"
    rf"|\[\s*{_SOURCE_WORD}(?P<named>{_NUMBERS})\s*\](?P<named_link>{_LINK})?"
    rf"|\(\s*{_SOURCE_WORD}(?P<paren>{_NUMBERS})\s*\)"
    rf"|\[\^[ \t]*(?P<foot>\d+)[ \t]*\](?!:)"
    rf"|【[ \t]*(?P<lenticular>{_NUMBERS})[ \t]*(?:†[^】\n]*)?】"
    rf")",
    re.IGNORECASE,
)
# what a reader would take for a citation: a bracket opening on a number (or ^number)
_CITATION_LIKE = re.compile(r"[\[【][ \t]*\^?[ \t]*\d[^\[\]【】\n]{0,24}[\]】]")
_RANGE = re.compile(r"(\d+)\s*[-–—]\s*(\d+)")
_MAX_RANGE = 50  # "[1-9999]" is not a citation of 9999 sources
_YEARS = range(1900, 2101)

# a line that is only the label of a source list: `## Sources`, `**References:**`, `Sources:`, ...
_LIST_HEADING = re.compile(
    r"[ \t]{0,3}(?:#{1,6}[ \t]*)?(?P<emphasis>\*\*|__|\*|_)?[ \t]*"
    r"(?:sources?|references?|bibliography|works[ \t]+cited|citations?|footnotes?|notes)"
    r"(?:[ \t]+(?:used|cited|consulted))?[ \t]*:?[ \t]*(?P=emphasis)?[ \t]*:?[ \t]*",
    re.IGNORECASE,
)
# an entry of a source list: `[1] Title. URL`, `[^1]: ...`, `【1】`, `1. ...`, `1) ...`, `- ...`, a bare URL
# (a label is not a link: `[1](https://...)` opening a line is a citation, not an entry)
_LIST_ENTRY = re.compile(
    r"[ \t]*(?:\[\^?\d+\](?!\():?|【\d+】|\d+[.)](?=[ \t]|$)|[-*+•](?=[ \t]|$)|<?(?:https?://|www\.)\S+>?[ \t]*$)"
)
_LABELLED_ENTRY = re.compile(r"[ \t]*(?:\[\^?\d+\](?!\():?|【\d+】)")  # an entry opening on a bracketed number
_CONTINUATION = re.compile(r"(?: {2,}|\t)\S")  # an indented line continuing the entry above
_FOOTNOTE_DEFINITION = re.compile(r"^[ \t]{0,3}\[\^(\d+)\]:", re.MULTILINE)
_URL = re.compile(r"(?:https?://|www\.)[^\s<>()\[\]\"'`]+", re.IGNORECASE)
_DOMAIN = re.compile(
    r"\b(?:[a-z0-9-]+\.)+(?:com|org|net|edu|gov|int|mil|io|ai|co|uk|de|fr|es|it|nl|eu|ca|au|jp|cn|in|ch|se|no|"
    r"info|biz|dev|app|news|wiki|example)\b(?:/\S*)?",
    re.IGNORECASE,
)
_DOI = re.compile(r"\bdoi:\s*10\.|\b10\.\d{4,9}/\S+|\barxiv:\s*\d", re.IGNORECASE)
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)


def _parts(group: str) -> list[tuple[str, list[int]]]:
    """The parts of a marker (split on commas, semicolons and "and"), each with the numbers it names."""
    out: list[tuple[str, list[int]]] = []
    for part in re.split(r"\s*(?:[,;]\s*(?:and\s+|&\s*)?|\band\b\s*|&\s*)\s*", group.strip(), flags=re.IGNORECASE):
        part = part.strip()
        span = _RANGE.fullmatch(part)
        if span:
            low, high = int(span.group(1)), int(span.group(2))
            numbers = list(range(low, high + 1)) if 0 <= high - low <= _MAX_RANGE else [low, high]
            out.append((part, numbers))
        elif part:
            out.append((part, [int(part)]))
    return out


# ----------------------------------------------------------------------------- code is never touched


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


# what any code block needs (CommonMark): a fence, or a line indented four columns (a tab counts;
# blockquotes' `>` and list markers may come first: `-\t\tx` is code inside a list item)
_MAY_HOLD_CODE_BLOCK = re.compile(r"```|~~~|^(?:[ >]|[-+*](?=[ \t])|\d{1,9}[.)](?=[ \t]))*(?: {4}|\t)", re.MULTILINE)


@lru_cache(maxsize=8)  # a check asks for the same text's blocks more than once
def _code_lines(text: str) -> frozenset[int]:
    """The lines (0-based) of fenced and indented code blocks, as CommonMark parses them (a text
    with no fence and no line indented four columns has none: not parsed)."""
    if not _MAY_HOLD_CODE_BLOCK.search(text):
        return frozenset()
    lines: set[int] = set()
    for token in _markdown().parse(text):
        if token.type in ("fence", "code_block") and token.map:
            lines.update(range(token.map[0], token.map[1]))
    return frozenset(lines)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of code: whole code-block lines, then inline code spans in the rest."""
    blocks = _code_lines(text)
    spans: list[tuple[int, int]] = []
    offset = 0
    for number, line in enumerate(text.split("\n")):
        if number in blocks:
            spans.append((offset, offset + len(line) + 1))
        offset += len(line) + 1
    inline = [(m.start(), m.end()) for m in _INLINE_CODE.finditer(text) if not _inside(spans, m.start())]
    return sorted(spans + inline)


def _inside(spans: Sequence[tuple[int, int]], position: int) -> bool:
    index = bisect.bisect_right(spans, (position, float("inf"))) - 1
    return index >= 0 and spans[index][0] <= position < spans[index][1]


# ----------------------------------------------------------------------------- the model's own source lists


def _normal_url(url: str) -> str:
    url = url.strip().rstrip(".,;:!?>)").lower()
    if url.startswith("www."):
        url = "http://" + url
    parts = urlsplit(url)
    host = parts.netloc.removeprefix("www.")
    return f"{host}{parts.path.rstrip('/')}" + (f"?{parts.query}" if parts.query else "")


def _names_a_source(entry: str, titles: Sequence[str]) -> bool:
    """Whether a list entry names a source: a URL or domain, a bracketed number label, a DOI, or the
    title of a source the model was shown."""
    if _URL.search(entry) or _DOMAIN.search(entry) or _DOI.search(entry) or _LABELLED_ENTRY.match(entry):
        return True
    lowered = entry.casefold()
    return any(len(title) >= 8 and title.casefold() in lowered for title in titles)


def _list_block(lines: Sequence[str], start: int, code: AbstractSet[int]) -> tuple[int, list[str]] | None:
    """From `start` (just after a heading, or the first entry), the list that follows: the index
    after its last entry line and its entries (continuations joined); None if no entry, or if an
    entry cites a marker (then it is prose)."""
    entries: list[str] = []
    end = start
    in_entry = False
    index = start
    while index < len(lines) and index not in code:
        line = lines[index].rstrip()
        if not line:
            index += 1
            continue
        if entries and _LIST_HEADING.fullmatch(line):  # `Sources:` again, a second group of the same list
            in_entry = False
        elif _LIST_ENTRY.match(line):
            rest = _LIST_ENTRY.sub("", line, count=1)
            if _MARKER.search(rest):
                return None
            entries.append(line)
            in_entry = True
        elif in_entry and _CONTINUATION.match(line):
            if _MARKER.search(line):
                return None
            entries[-1] += " " + line.strip()
        else:
            break
        index += 1
        end = index
    return (end, entries) if entries else None


def _own_source_lists(
    lines: list[str], code: AbstractSet[int], shown: Sequence[SourceRef]
) -> tuple[list[tuple[int, int]], list[str]]:
    """The line ranges [start, end) of the model's own source lists, and the entries they hold."""
    titles = [s.title for s in shown if s.title]
    blocks: list[tuple[int, int]] = []
    entries: list[str] = []
    index = 0
    while index < len(lines):
        if index in code or not _LIST_HEADING.fullmatch(lines[index].rstrip()):
            index += 1
            continue
        found = _list_block(lines, index + 1, code)
        if found is not None and all(_names_a_source(e, titles) for e in found[1]):
            blocks.append((index, found[0]))
            entries += found[1]
            index = found[0]
        else:
            index += 1
    # no heading: bracket-labelled entries with a URL that end the text (`[1] Title. URL`, `[^1]: URL`)
    last = len(lines)
    while last > 0 and not lines[last - 1].strip():
        last -= 1
    start = last
    while (
        start > 0
        and start - 1 not in code
        and (
            not lines[start - 1].strip()
            or _LABELLED_ENTRY.match(lines[start - 1])
            or _CONTINUATION.match(lines[start - 1])
        )
    ):
        start -= 1
    while start < last and not _LABELLED_ENTRY.match(lines[start]):
        start += 1
    if start < last and (not blocks or blocks[-1][1] <= start):
        found = _list_block(lines, start, code)
        if (
            found is not None
            and found[0] >= last
            and all(_LABELLED_ENTRY.match(e) for e in found[1])
            and all(_URL.search(e) or _DOMAIN.search(e) or _DOI.search(e) for e in found[1])
        ):
            blocks.append((start, last))
            entries += found[1]
    return blocks, entries


def _without(lines: list[str], blocks: Sequence[tuple[int, int]]) -> str:
    """The lines without the blocks (and the blank lines just before each)."""
    drop: set[int] = set()
    for start, end in blocks:
        drop.update(range(start, end))
        before = start - 1
        while before >= 0 and not lines[before].strip():
            drop.add(before)
            before -= 1
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).rstrip()


def split_own_source_list(text: str, shown: Sequence[SourceRef] = ()) -> tuple[str, str]:
    """`text` without the source lists the model wrote itself, and those lists ("" if none)."""
    lines = text.rstrip().split("\n")
    blocks, _ = _own_source_lists(lines, _code_lines(text.rstrip()), shown)
    removed = "\n\n".join("\n".join(lines[start:end]).strip() for start, end in blocks)
    return (_without(lines, blocks) if blocks else text.rstrip()), removed


# ----------------------------------------------------------------------------- markers


def cited_numbers(text: str) -> list[list[int]]:
    """The numbers each citation marker in `text` names, in order (code and years left out): what
    `check_citations` reads, so a test can check a checked text's markers by the same rule."""
    code = _code_spans(text)
    out = []
    for match in _MARKER.finditer(text):
        if _inside(code, match.start() + len(match.group("space"))):
            continue
        group = match.group("bare") or match.group("named") or match.group("paren")
        group = group or match.group("foot") or match.group("lenticular")
        out.append([n for _, numbers in _parts(group) for n in numbers])
    return out


_MARKDOWN_LINK = re.compile(
    r"(?P<image>!?)\[(?P<label>[^\]\n]*)\]"
    r"\((?P<url>(?:[a-z][a-z0-9+.-]*:|//|www\.)[^()\s]*(?:\([^()\s]*\))?[^()\s]*)(?:\s+\"[^\"]*\")?\)",
    re.IGNORECASE,
)
_BARE_URL = re.compile(r"(?<![\w(/])(?:https?://|www\.)[^\s<>\"'`\]\[)]+", re.IGNORECASE)
_URL_TAIL = ".,;:!?"  # punctuation a sentence puts after a URL, not part of it


def _drop_unread_urls(text: str, read: set[str]) -> tuple[str, list[str]]:
    """`text` without the URLs outside code that name no source read (`read`: normal forms; a link
    keeps its text); the URLs removed."""
    removed: list[str] = []

    def link(match: re.Match[str]) -> str:
        url = match.group("url")
        if _inside(code, match.start()) or _normal_url(url) in read:
            return match.group(0)
        removed.append(url)
        return match.group("label")

    def bare(match: re.Match[str]) -> str:
        url = match.group(0)
        stripped = url.rstrip(_URL_TAIL)
        if _inside(code, match.start()) or _normal_url(stripped) in read:
            return url
        removed.append(stripped)
        return url[len(stripped) :]

    code = _code_spans(text)
    text = _MARKDOWN_LINK.sub(link, text)
    code = _code_spans(text)
    return _BARE_URL.sub(bare, text), removed


def source_line(number: int, source: SourceRef) -> str:
    where = source.url or "gold information provided with the task"
    return f"[{number}] {source.title or source.id}. {where}"


def check_citations(text: str, shown: Sequence[SourceRef], *, heading: str = "Sources") -> CitationReport:
    """Keep the markers that name a source in `shown` (`shown[i]` was presented as `[i+1]`),
    drop the rest, renumber by first use and end the text with the list of cited sources."""
    text = text.rstrip()
    lines = text.split("\n")
    blocks, listed = _own_source_lists(lines, _code_lines(text), shown)
    body = _without(lines, blocks) if blocks else text
    read_urls = {_normal_url(s.url) for s in shown if s.url}
    named_urls = [u for entry in listed for u in [*_URL.findall(entry), *(m.group(0) for m in _DOMAIN.finditer(entry))]]
    unread_urls = list(dict.fromkeys(u for u in named_urls if _normal_url(u) not in read_urls))
    # a bare domain found inside a URL already counted is not a second URL
    unread_urls = [u for u in unread_urls if not any(u != v and u in v for v in unread_urls)]

    code = _code_spans(body)
    footnotes = {int(n) for n in _FOOTNOTE_DEFINITION.findall(body)}  # footnotes kept as prose
    renumber: dict[int, int] = {}
    unresolved: list[int] = []
    recognised: list[tuple[int, int]] = []
    markers = 0
    link_urls_dropped = 0
    years_left = 0
    footnotes_left = 0

    def is_year_part(numbers: list[int]) -> bool:
        return all(n in _YEARS and not 1 <= n <= len(shown) for n in numbers)

    def replace(match: re.Match[str]) -> str:
        nonlocal markers, link_urls_dropped, years_left, footnotes_left
        start = match.start() + len(match.group("space"))
        if _inside(code, start):
            return match.group(0)
        recognised.append((start, match.end()))
        foot = match.group("foot")
        if foot is not None and int(foot) in footnotes:
            footnotes_left += 1
            return match.group(0)
        bare = match.group("bare")
        group = bare or match.group("named") or match.group("paren") or foot or match.group("lenticular")
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

    checked = _MARKER.sub(replace, body)
    checked, urls_removed = _drop_unread_urls(checked, read_urls)
    # a citation-like bracket no marker form covers: left as written, and counted
    unparsed = [
        m.group(0)
        for m in _CITATION_LIKE.finditer(body)
        if not _inside(code, m.start())
        and not any(s <= m.start() < e for s, e in recognised)
        and not (m.start() == _line_start(body, m.start()) and _FOOTNOTE_DEFINITION.match(body, m.start()))
    ]
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
        listing = [source_line(new, shown[old - 1]) for old, new in cited]
        checked = f"{checked}\n\n## {heading}\n" + "\n".join(listing)
    stats: dict[str, object] = {
        "markers": markers,
        "resolved": markers - len(unresolved),
        "unresolved_removed": len(unresolved),
        "unresolved_numbers": sorted(set(unresolved)),
        "sources_read": len(shown),
        "sources_cited": len(citations),
        "model_source_list_removed": bool(blocks),
        "urls_removed": len(urls_removed),
        "removed_urls": urls_removed[:10],
        "model_list_entries_removed": len(listed),
        "model_list_unread_urls": len(unread_urls),
        "model_list_unread": unread_urls[:20],
        "link_urls_dropped": link_urls_dropped,
        "years_left": years_left,
        "footnotes_left": footnotes_left,
        "unparsed_markers": len(unparsed),
        "unparsed_examples": list(dict.fromkeys(unparsed))[:5],
    }
    return CitationReport(text=checked, citations=citations, stats=stats)


def _line_start(text: str, position: int) -> int:
    return text.rfind("\n", 0, position) + 1
