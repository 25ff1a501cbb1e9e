"""Opening the files Atelier keeps (a run folder's) never through a symbolic link.

A run folder can be copied from elsewhere, shared, or written into by an external agent's job (its
job folder lies inside it): a link planted in place of one of its files (`ln -s ~/.bashrc
run/results.jsonl`, `ln -s /etc/passwd run/.atelier.lock`) would make a run append to, truncate or
read whatever it points to, and a dangling one would create a file outside the folder. So each
such file is opened with `O_NOFOLLOW`, and must be a regular file: a link, a FIFO or a device in
its place is refused with `UnsafeFileError` (bad input: one line naming the file, exit 2), before
a byte is read or written. Files written whole are replaced atomically instead
(`atomic_files.write_atomically`), which replaces a link rather than writing through it.

Nor is any folder on the way followed when it is a link: below a run folder (the outermost folder
above a path that holds a run's lock file, `.atelier.lock`), every component is opened one at a
time from the run folder with `O_NOFOLLOW` (`folder_fd`), so a planted `labels/<judge>` or
`view/episodes` link is refused too, and folders are made the same way (`make_folders`). Above the
run folder (where the researcher put it: a linked disk, a mounted share) links are followed.
Every file and folder Atelier writes is opened or made here (`tests/test_run_folder_writers.py`
walks the code base for any other writer).
"""

from __future__ import annotations

import contextlib
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
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")
RUN_FOLDER_MARK = ".atelier.lock"  # every run folder holds its lock file (runs/folder/lock.py)
_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
# folder -> the run folder above it, as found: a cache of what the search up to / found (a run
# folder's mark stays while it is one; a folder found under none is searched again each time)
_KNOWN_RUN_FOLDERS: dict[str, str] = {}


class UnsafeFileError(DataError):
    """A file Atelier keeps is a link, or not a regular file: it is not opened."""


def _refusal(path: str | os.PathLike[str], what: str) -> UnsafeFileError:
    return UnsafeFileError(
        f"is {what}, not a regular file; Atelier never opens a run folder's files through one: remove it",
        file=os.fspath(path),
    )


def run_folder_of(path: str | os.PathLike[str]) -> Path | None:
    """The outermost folder above `path` that is a run folder (holds `.atelier.lock`), if any."""
    found = _run_folder_of(os.path.abspath(path))
    return Path(found) if found is not None else None


def _run_folder_of(path: str) -> str | None:
    start = folder = os.path.dirname(path)  # strings, not pathlib: this runs on every write
    known = _KNOWN_RUN_FOLDERS.get(start)
    if known is not None and os.path.lexists(os.path.join(known, RUN_FOLDER_MARK)):
        return known  # one check instead of one per folder up to /
    found = None
    while True:
        if os.path.lexists(os.path.join(folder, RUN_FOLDER_MARK)):
            found = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if found is not None:
        if len(_KNOWN_RUN_FOLDERS) >= 1024:
            _KNOWN_RUN_FOLDERS.clear()
        _KNOWN_RUN_FOLDERS[start] = found
    return found


def folder_fd(folder: str | os.PathLike[str], *, create: bool = False) -> int:
    """An `O_PATH` descriptor of `folder` (made, with its parents, when `create`). Below a run folder
    each component is opened from the run folder without following a link: one that is a link, or
    not a folder, is refused (`UnsafeFileError`)."""
    folder = os.path.abspath(folder)
    root = _run_folder_of(os.path.join(folder, RUN_FOLDER_MARK))
    if root is None:
        if create:
            os.makedirs(folder, exist_ok=True)
        return os.open(folder, _FOLDER_FLAGS)
    fd = os.open(root, _FOLDER_FLAGS)
    where = root
    try:
        for part in filter(None, folder[len(root) :].split(os.sep)):
            where = os.path.join(where, part)
            try:
                following = os.open(part, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                following = os.open(part, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refusal(where, "a symbolic link" if os.path.islink(where) else "a file") from None
                raise
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_folders(folder: str | os.PathLike[str]) -> None:
    """`os.makedirs(folder, exist_ok=True)`, never through a link below a run folder."""
    os.close(folder_fd(folder, create=True))


def open_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags)` that refuses a link or a non-regular file in `path`'s place, or (below a
    run folder) a link in place of any folder on its way."""
    parent = folder_fd(os.path.dirname(os.path.abspath(path)))
    try:
        # O_NONBLOCK: a FIFO planted in the file's place must not hang the open; cleared below
        fd = os.open(os.path.basename(path), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refusal(path, "a symbolic link") from None
        raise
    finally:
        os.close(parent)
    found = os.fstat(fd).st_mode
    if not stat.S_ISREG(found):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(found) else "a folder" if stat.S_ISDIR(found) else "a device or socket"
        raise _refusal(path, kind)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_file(path: str | os.PathLike[str], mode: str = "r", encoding: str | None = None, **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` never through a link (modes `r`, `r+`, `w`, `a`, `x`, each with or without `b`)."""
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
