"""Opening the files Atelier keeps (a run folder's) never through a symbolic link.

A run folder can be copied from elsewhere, shared, or written into by an external agent's job (its
job folder lies inside it): a link planted in place of one of its files (`ln -s ~/.bashrc
run/results.jsonl`, `ln -s /etc/passwd run/.atelier.lock`) would make a run append to, truncate or
read whatever it points to, and a dangling one would create a file outside the folder. So each
such file is opened with `O_NOFOLLOW`, and must be a regular file: a link, a FIFO or a device in
its place is refused with `UnsafeFileError` (bad input: one line naming the file, exit 2), before
a byte is read or written. Files written whole are replaced atomically instead
(`atomic_files.write_atomically`), which replaces a link rather than writing through it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import IO, Any

from atelier.benchmarks.common.errors import DataError

# open()'s modes -> os.open flags
_FLAGS = {
    "r": os.O_RDONLY,
    "r+": os.O_RDWR,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


class UnsafeFileError(DataError):
    """A file Atelier keeps is a link, or not a regular file: it is not opened."""


def _refusal(path: str | os.PathLike[str], what: str) -> UnsafeFileError:
    return UnsafeFileError(
        f"is {what}, not a regular file; Atelier never opens a run folder's files through one: remove it",
        file=os.fspath(path),
    )


def open_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags)` that refuses a link or a non-regular file in `path`'s place."""
    try:
        # O_NONBLOCK: a FIFO planted in the file's place must not hang the open; cleared below
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refusal(path, "a symbolic link") from None
        raise
    found = os.fstat(fd).st_mode
    if not stat.S_ISREG(found):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(found) else "a folder" if stat.S_ISDIR(found) else "a device or socket"
        raise _refusal(path, kind)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_file(path: str | os.PathLike[str], mode: str = "r", encoding: str | None = None, **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` never through a link (modes `r`, `r+`, `w`, `a`, each with or without `b`)."""
    base = mode.replace("b", "")
    if base not in _FLAGS:
        raise ValueError(f"open_file: unsupported mode {mode!r}")
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    return os.fdopen(open_fd(path, _FLAGS[base]), mode, encoding=encoding, **kwargs)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open_file(path, "rb") as fh:
        return fh.read()


def read_text(path: str | os.PathLike[str], encoding: str = "utf-8", errors: str = "strict") -> str:
    with open_file(path, "r", encoding=encoding, errors=errors) as fh:
        return fh.read()


def refuse_links(*paths: str | os.PathLike[str]) -> None:
    """Refuse (as `open_fd` does) any of `paths` that exists and is not a regular file: for a file a
    library opens itself (SQLite: pass `sqlite_files(path)`)."""
    for path in paths:
        try:
            found = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(found):
            raise _refusal(path, "a symbolic link")
        if not stat.S_ISREG(found):
            raise _refusal(path, "a FIFO" if stat.S_ISFIFO(found) else "a folder, device or socket")


def sqlite_files(path: str | os.PathLike[str]) -> list[Path]:
    """An SQLite database and the files SQLite opens beside it."""
    return [Path(f"{os.fspath(path)}{suffix}") for suffix in SQLITE_COMPANIONS]
