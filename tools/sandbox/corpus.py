"""Document corpora the sandbox web serves: the bundled sample pages, the wiki summaries, or a folder.

Every document has a stable, citable URL: its own when the source gives one, the Wikipedia article
for the wiki summaries, otherwise `https://<corpus>.sandbox.invalid/doc/<id>` (the reserved
`.invalid` domain never resolves, so such a URL can only ever be fetched through the sandbox).

A folder corpus holds `*.jsonl` files (one document per line: `title` and `text` required; `id`,
`url`, `description`, `topic` optional; paragraphs separated by blank lines) and `*.html` files
(served as they are; title, text and canonical URL extracted with trafilatura).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import RawRecord, read_jsonl
from atelier.tools.urls import canonical_url

SAMPLE_PAGES = Path(str(files("atelier.benchmarks.sample") / "pages.jsonl"))
BUILTIN_CORPORA = ("sample", "wiki")
_WIKI_URL_SAFE = "()_,'!:;@$*-.~/"


class Document(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    text: str
    url: str
    description: str = ""
    topic: str = ""
    html: str | None = Field(default=None, description="A page served exactly as given (HTML source files).")

    def paragraphs(self) -> list[str]:
        return [part.strip() for part in re.split(r"\n\s*\n", self.text) if part.strip()]


class JsonlDocument(RawRecord):
    """One line of a folder corpus's .jsonl file."""

    title: str = Field(min_length=1)
    text: str = Field(min_length=1)
    id: str | None = None
    url: str | None = None
    description: str = ""
    topic: str = ""

    @field_validator("url")
    @classmethod
    def _absolute_http(cls, url: str | None) -> str | None:
        if url is None:
            return None
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"invalid URL {url!r} ({exc})") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"url must be an absolute http(s) URL, got {url!r}")
        return url


def wiki_url(title: str) -> str:
    return "https://en.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe=_WIKI_URL_SAFE)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "corpus"


@dataclass
class Corpus:
    name: str
    documents: list[Document]
    by_id: dict[str, int] = field(init=False)
    by_url: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id, self.by_url = {}, {}
        for index, document in enumerate(self.documents):
            if document.id in self.by_id:
                raise DataError(f"duplicate document id {document.id!r}", file=self.name, field="id")
            self.by_id[document.id] = index
            self.by_url.setdefault(canonical_url(document.url), index)

    def __len__(self) -> int:
        return len(self.documents)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the documents' content: keys caches of anything derived from the corpus."""
        digest = hashlib.sha256()
        for document in self.documents:
            digest.update(
                json.dumps([document.id, document.url, document.title, document.description, document.text]).encode()
            )
        return digest.hexdigest()

    def document_by_url(self, url: str) -> Document | None:
        try:
            index = self.by_url.get(canonical_url(url))
        except httpx.InvalidURL:
            return None
        return None if index is None else self.documents[index]


def _fallback_url(corpus_name: str, doc_id: str) -> str:
    return f"https://{_slug(corpus_name)}.sandbox.invalid/doc/{quote(doc_id, safe='')}"


def read_jsonl_documents(path: Path, corpus_name: str) -> list[Document]:
    documents = []
    for number, record in enumerate(read_jsonl(path, JsonlDocument), start=1):
        doc_id = record.id or f"{path.stem}-{number}"
        documents.append(
            Document(
                id=doc_id,
                title=record.title,
                text=record.text,
                url=record.url or _fallback_url(corpus_name, doc_id),
                description=record.description,
                topic=record.topic,
            )
        )
    return documents


def read_html_document(path: Path, root: Path, corpus_name: str) -> Document:
    from atelier.tools.extract import decode_body, extract_html

    try:
        html, _ = decode_body(path.read_bytes(), None)
        title, text, metadata = extract_html(html, None)
    except Exception as exc:  # noqa: BLE001 - whatever a codec or the extractor raises: this file is at fault
        raise DataError(
            f"the HTML page could not be decoded or extracted ({type(exc).__name__}: {exc})", file=path
        ) from None
    doc_id = path.relative_to(root).with_suffix("").as_posix()
    if not text:
        raise DataError("no main text found in the HTML page", file=path)
    url = metadata.get("url", "")
    url = url if url.startswith(("http://", "https://")) else _fallback_url(corpus_name, doc_id)
    return Document(
        id=doc_id,
        title=title or path.stem,
        text=text,
        url=url,
        description=str(metadata.get("description", "")),
        html=html,
    )


def wiki_documents() -> list[Document]:
    from atelier.benchmarks.loaders._wiki_summaries import RELPATH, read_summaries

    return [
        Document(
            id=summary.title,
            title=summary.title,
            text=summary.extract,
            url=wiki_url(summary.title),
            description=summary.description or "",
            topic=summary.topic or "",
        )
        for summary in read_summaries(resolve(RELPATH)).values()
    ]


def sample_documents() -> list[Document]:
    from atelier.benchmarks.loaders.sample import sample_pages

    return [Document(**page.model_dump(include=set(Document.model_fields))) for page in sample_pages()]


def read_folder(root: Path) -> list[Document]:
    documents: list[Document] = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".jsonl":
            documents += read_jsonl_documents(path, root.name)
        elif path.suffix in (".html", ".htm"):
            documents.append(read_html_document(path, root, root.name))
    if not documents:
        raise DataError("no documents: the folder holds no .jsonl or .html files", file=root)
    return documents


def load_corpus(spec: str) -> Corpus:
    """'sample', 'wiki', or a path to a folder or a .jsonl file."""
    if spec == "sample":
        return Corpus("sample", sample_documents())
    if spec == "wiki":
        return Corpus("wiki", wiki_documents())
    path = Path(spec).expanduser()
    if path.is_dir():
        return Corpus(path.name, read_folder(path))
    if path.is_file() and path.suffix == ".jsonl":
        return Corpus(path.stem, read_jsonl_documents(path, path.stem))
    raise ConfigError(f"corpus {spec!r} is neither {' nor '.join(BUILTIN_CORPORA)} nor a folder or .jsonl file")
