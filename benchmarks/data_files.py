"""Where data files come from: `ATELIER_DATA_DIR`, else a local cache, else a checked download.

Every file a loader reads is registered here with its path relative to the data root, its
upstream URL and its sha256, so the same code reads `../shared/data` in this workplace and
fetches the identical bytes anywhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from benchmarks.errors import DataError

ENV_DATA_DIR = "ATELIER_DATA_DIR"
ENV_CACHE_DIR = "ATELIER_CACHE_DIR"


@dataclass(frozen=True)
class DataFile:
    relpath: str  # e.g. "ikat/2023_test_topics.json"
    url: str | None  # upstream location of these exact bytes
    sha256: str | None  # of the bytes as stored under relpath
    dataset: str  # the data set it belongs to (pdr, ikat, ...)
    description: str = ""


_FILES: dict[str, DataFile] = {}


def register_file(f: DataFile) -> DataFile:
    _FILES[f.relpath] = f
    return f


def registered_files(dataset: str | None = None) -> list[DataFile]:
    return [f for f in _FILES.values() if dataset is None or f.dataset == dataset]


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


def resolve(relpath: str) -> Path:
    """The local path of a data file, looking in the data dir, then the cache, then downloading.

    Downloading is implemented in `benchmarks.download`; it checks the registered sha256.
    """
    root = data_dir()
    if root is not None and (root / relpath).exists():
        return root / relpath
    cached = cache_dir() / "data" / relpath
    if cached.exists():
        return cached
    entry = _FILES.get(relpath)
    if entry is None or entry.url is None:
        where = f"{ENV_DATA_DIR}={root}" if root else f"{ENV_DATA_DIR} (unset)"
        raise DataError(f"data file not found in {where} or {cached.parent}, and it has no upstream URL", file=relpath)
    from benchmarks.download import fetch_checked

    return fetch_checked(entry, cached)
