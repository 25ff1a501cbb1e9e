"""Where data files come from: `ATELIER_DATA_DIR`, else a local cache, else a checked download.

Every file a loader reads is registered here (by `benchmarks.data_catalog`) with its path relative
to the data root, its upstream URL and its sha256, so the same code reads `../shared/data` in this
workplace and fetches the identical bytes anywhere else.

Two upstream forms need care:
- a file we keep gzip-compressed (`*.gz`) while upstream serves it plain: `upstream_sha256` is the
  sha256 of the plain bytes; a fetched copy is verified plain, then compressed (`compress_on_fetch`);
- a file that upstream ships inside a zip archive (a wheel): `archive_member` names it.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from atelier.benchmarks.common.errors import DataError

ENV_DATA_DIR = "ATELIER_DATA_DIR"
ENV_CACHE_DIR = "ATELIER_CACHE_DIR"

RecordCounter = Callable[[Path], dict[str, int]]


@dataclass(frozen=True)
class DataFile:
    relpath: str  # e.g. "ikat/2023_test_topics.json"
    url: str | None  # upstream location of these bytes (or of the archive holding them)
    sha256: str | None  # of the bytes as stored under relpath
    dataset: str  # the data set it belongs to (pdr, ikat, ...)
    description: str = ""
    upstream_sha256: str | None = None  # of the bytes at `url` when they differ from the stored form
    archive_member: str | None = None  # path inside the zip archive at `url`
    count_records: RecordCounter | None = None  # parses every record; returns counts by kind
    subset: str = ""  # the part of the data set it belongs to (a language, a year), for summaries
    # the size of the bytes `expected_upstream_sha256` covers (the plain file; an archive's member), and
    # of the archive at `url` itself: a download or an extraction that goes past them is refused
    upstream_bytes: int | None = None
    archive_bytes: int | None = None

    @property
    def compress_on_fetch(self) -> bool:
        """Stored gzip-compressed, served plain upstream."""
        source = self.archive_member or self.url or ""
        return self.relpath.endswith(".gz") and not source.endswith(".gz")

    @property
    def expected_upstream_sha256(self) -> str | None:
        return self.upstream_sha256 or self.sha256


_FILES: dict[str, DataFile] = {}
_CATALOG_MODULE = "atelier.benchmarks.data_catalog"


def register_file(f: DataFile) -> DataFile:
    _FILES[f.relpath] = f
    return f


def _ensure_catalog() -> None:
    importlib.import_module(_CATALOG_MODULE)


def registered_files(dataset: str | None = None) -> list[DataFile]:
    _ensure_catalog()
    return [f for f in _FILES.values() if dataset is None or f.dataset == dataset]


def registered_file(relpath: str) -> DataFile | None:
    _ensure_catalog()
    return _FILES.get(relpath)


def data_dir() -> Path | None:
    """The data root: `$ATELIER_DATA_DIR`, else `../shared/data` beside the project when it exists."""
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env).expanduser()
    here = Path(__file__).resolve().parent.parent  # the project checkout
    for candidate in (here.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return None


def cache_dir() -> Path:
    """Atelier's cache root (`$ATELIER_CACHE_DIR`, default `~/.cache/atelier`)."""
    return Path(os.environ.get(ENV_CACHE_DIR) or Path.home() / ".cache" / "atelier").expanduser()


def cached_path(relpath: str) -> Path:
    return cache_dir() / "data" / relpath


def locate(relpath: str) -> tuple[Path, str] | None:
    """Where a data file is found locally, with the source's name (`data dir` / `cache`), or None."""
    root = data_dir()
    if root is not None and (root / relpath).exists():
        return root / relpath, "data dir"
    cached = cached_path(relpath)
    if cached.exists():
        return cached, "cache"
    return None


def where_looked(relpath: str) -> str:
    """Where `locate` looked for a data file, for every "not found": the data directory (or why
    there is none) and the cache."""
    root = data_dir()
    here = (
        f"the data directory {root / relpath}"
        if root is not None
        else f"no data directory (${ENV_DATA_DIR} unset, no ../shared/data beside the project or here)"
    )
    return f"looked in {here} and the cache {cached_path(relpath)}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sha256_gunzipped(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"not a readable gzip file: {exc}", file=path) from None
    return digest.hexdigest()


def verify_file(entry: DataFile, path: Path) -> str:
    """Check a local copy against the registry. Returns how it matched; raises DataError if not.

    A gzip file fetched from a plain upstream was recompressed here, so its compressed bytes differ
    from the registered ones; it matches when its decompressed content has the upstream sha256.
    """
    if entry.sha256 is None:
        raise DataError("no sha256 is registered for this file", file=path)
    actual = sha256_file(path)
    if actual == entry.sha256:
        return "sha256 ok"
    if entry.compress_on_fetch and entry.upstream_sha256 and _sha256_gunzipped(path) == entry.upstream_sha256:
        return "sha256 of decompressed content ok (recompressed copy)"
    raise DataError(f"sha256 mismatch: expected {entry.sha256}, got {actual}", file=path)
