"""Writing a file so that readers see the old bytes or the new ones, never a torn mix.

The bytes go to a temporary file beside the target (same folder, so same file system), which then
replaces it (`os.replace`, atomic on POSIX). A write that fails leaves the target as it was and no
temporary file behind. Two processes writing the same path each use their own temporary file; the
last replace wins. The temporary file's name starts with a dot, so folder listings that skip hidden
files (the Ray executor's run-folder sync) never pick one up half-written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.redaction import active_redactor


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file whose content replaces `path` when the block ends without an exception
    (missing folders are created; below a run folder, none on the way through a link)."""
    folder = no_follow.folder_fd(os.path.dirname(os.path.abspath(path)), create=True)
    name, temporary = os.path.basename(path), f".tmp-{secrets.token_hex(6)}"
    try:
        # 0o666 less the umask, as open() gives (tempfile.mkstemp would make every file owner-only)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                yield out
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, redact: bool = True) -> None:
    """Replace `path` with `data` (a str is written as UTF-8, with the active redactor's keys blanked
    unless `redact` is False: a file named by the hash of its text must keep it byte for byte)."""
    if isinstance(data, str):
        data = (active_redactor().redact(data) if redact else data).encode("utf-8")
    with atomic_writer(path) as out:
        out.write(data)


def copy_files(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy the regular files of folder `source` (and its subfolders) into `target`, each written
    atomically; a link or any other kind of file in `source` is not copied, nor followed."""
    for folder, subfolders, names in os.walk(source):  # os.walk follows no link to a folder
        relative = os.path.relpath(folder, source)
        subfolders[:] = [d for d in subfolders if not os.path.islink(os.path.join(folder, d))]
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                write_atomically(os.path.join(target, relative, name), no_follow.read_bytes(path), redact=False)


def write_if_absent(path: str | os.PathLike[str], data: bytes | str, *, redact: bool = True) -> None:
    """`write_atomically` for a file written once: content-addressed (one already there holds the
    same bytes) or whose first copy wins. A file already there is left as it is."""
    if not os.path.lexists(path):
        write_atomically(path, data, redact=redact)
