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
from pathlib import Path
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmarks.data_files import resolve
from benchmarks.errors import ConfigError, DataError
from tools.urls import canonical_url

WIKI_FILE = "wiki_summaries/summaries_en.json"
SAMPLE_PAGES = Path(__file__).resolve().parents[2] / "benchmarks" / "sample" / "pages.jsonl"
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


class _JsonlRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    title: str = Field(min_length=1)
    text: str = Field(min_length=1)
    id: str | None = None
    url: str | None = None
    description: str = ""
    topic: str = ""


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


def _checked_url(url: str, path: Path, line: int | None) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise DataError(f"invalid URL {url!r} ({exc})", file=path, line=line, field="url") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise DataError(f"url must be an absolute http(s) URL, got {url!r}", file=path, line=line, field="url")
    return url


def _fallback_url(corpus_name: str, doc_id: str) -> str:
    return f"https://{_slug(corpus_name)}.sandbox.invalid/doc/{quote(doc_id, safe='')}"


def read_jsonl_documents(path: Path, corpus_name: str) -> list[Document]:
    documents = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = _JsonlRecord.model_validate_json(line)
            except ValidationError as exc:
                first = exc.errors()[0]
                field_name = ".".join(str(part) for part in first["loc"]) or None
                raise DataError(first["msg"], file=path, line=number, field=field_name) from None
            doc_id = record.id or f"{path.stem}-{number}"
            url = _checked_url(record.url, path, number) if record.url else _fallback_url(corpus_name, doc_id)
            documents.append(
                Document(
                    id=doc_id,
                    title=record.title,
                    text=record.text,
                    url=url,
                    description=record.description,
                    topic=record.topic,
                )
            )
    return documents


def read_html_document(path: Path, root: Path, corpus_name: str) -> Document:
    from tools.extract import decode_body, extract_html

    html, _ = decode_body(path.read_bytes(), None)
    doc_id = path.relative_to(root).with_suffix("").as_posix()
    title, text, metadata = extract_html(html, None)
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


def read_wiki_summaries(path: Path) -> list[Document]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"not JSON: {exc}", file=path) from None
    if not isinstance(data, dict):
        raise DataError("expected an object of title -> summary", file=path)
    documents = []
    for key, record in data.items():
        if not isinstance(record, dict) or not record.get("extract"):
            raise DataError(f"summary {key!r} has no 'extract'", file=path, field=f"{key}.extract")
        title = str(record.get("title") or key)
        documents.append(
            Document(
                id=title,
                title=title,
                text=str(record["extract"]),
                url=wiki_url(title),
                description=str(record.get("description") or ""),
                topic=str(record.get("topic") or ""),
            )
        )
    return documents


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
        if not SAMPLE_PAGES.exists():
            raise DataError("the bundled sample pages are missing", file=SAMPLE_PAGES)
        return Corpus("sample", read_jsonl_documents(SAMPLE_PAGES, "sample"))
    if spec == "wiki":
        return Corpus("wiki", read_wiki_summaries(resolve(WIKI_FILE)))
    path = Path(spec).expanduser()
    if path.is_dir():
        return Corpus(path.name, read_folder(path))
    if path.is_file() and path.suffix == ".jsonl":
        return Corpus(path.stem, read_jsonl_documents(path, path.stem))
    raise ConfigError(f"corpus {spec!r} is neither {' nor '.join(BUILTIN_CORPORA)} nor a folder or .jsonl file")
