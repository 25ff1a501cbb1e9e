"""The offline Wikipedia corpus: 10,033 lead summaries (title -> {title, extract, description, topic}).

Not a benchmark: the sandbox web serves it as a search corpus. Its reader lives here so the data
registry can validate every record of it like any other registered file.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from atelier.benchmarks.loaders._records import RawRecord, read_json_object

RELPATH = "wiki_summaries/summaries_en.json"


class WikiSummary(RawRecord):
    title: str = Field(min_length=1)
    extract: str
    description: str | None = None
    topic: str | None = None


def read_summaries(path: Path) -> dict[str, WikiSummary]:
    return read_json_object(path, WikiSummary)


def count_summaries(path: Path) -> dict[str, int]:
    return {"summaries": len(read_summaries(path))}
