"""One process per run folder: an OS lock (`flock`) on `<run>/.atelier.lock`, holding the holder's pid.

The kernel drops the lock when its process ends, however it ends (kill -9 included), so a lock
left by a dead process is simply taken over; a second process finds it held and stops at once,
naming the holder, before it has read or written anything else in the folder. `atelier run` takes
it before its heavy imports, so the refusal comes within a second.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError

LOCK_NAME = no_follow.RUN_FOLDER_MARK


class RunFolderLock:
    """The lock of one run folder, held from `acquire` (or entering the block) to `release`."""

    def __init__(self, folder: Path, what: str = "run") -> None:
        self.folder = Path(folder)
        self.what = what
        self._fd: int | None = None
        self._made: list[Path] = []  # the folders acquiring made, deepest first

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunFolderLock:
        """Take the lock (creating the folder), or raise ConfigError naming the process holding it."""
        if self._fd is not None:
            return self
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(f"{self.folder} is a file, not a run folder: give --out a new or existing run folder")
        self._made = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
        no_follow.make_folders(self.folder)
        fd = no_follow.open_fd(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # a link there: refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"{self.folder} is in use by another atelier process (pid {holder}); wait for it "
                f"to end, or give this {self.what} another --out folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the folder go; one this lock made and nothing else wrote to (a run refused before its
        first file: a failed preflight, a bad recipe) is removed again, so a refusal leaves no trace."""
        if self._fd is None:
            return
        if self._made and [p.name for p in self.folder.iterdir()] == [LOCK_NAME]:
            (self.folder / LOCK_NAME).unlink()
            for made in self._made:
                if any(made.iterdir()):
                    break
                made.rmdir()
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
