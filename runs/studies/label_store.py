"""Where the labelling page keeps labels: `RUN_DIR/labels/<judge>/<labeller>.jsonl`, one file per
labeller, one JSON line per label as it was given.

A label is appended in one write and fsynced before the page is told it is saved, so a label the
page showed as saved survives a crash; a torn last line (the process died while writing it) is
dropped on reading. Changing a label appends a new line: the last line of a (case, system,
criterion) wins, so the file is also the history of what the labeller gave. Each line holds the
rating as given on the rubric's scale (`rating`, `scale`) and the score on the judge's criterion
scale (`score`, what `atelier meta-eval` compares), and when it was given.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl

LABELS_DIR = "labels"
LABELLER_FORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


def checked_labeller(name: str) -> str:
    """A labeller's name, usable as a file name: letters, digits, `_ . -`, up to 40 characters."""
    if not LABELLER_FORM.fullmatch(name):
        raise ConfigError(
            f"labeller {name!r}: give 1-40 letters, digits, '_', '.' or '-' (starting with a letter or digit)"
        )
    return name


def labels_path(run_dir: Path, judge: str, labeller: str) -> Path:
    return Path(run_dir) / LABELS_DIR / judge / f"{checked_labeller(labeller)}.jsonl"


def labellers(run_dir: Path, judge: str) -> list[str]:
    """Who has labelled this run's judge on the page."""
    folder = Path(run_dir) / LABELS_DIR / judge
    return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []


class LabelStore:
    """One labeller's labels of one judge's criteria in one run."""

    def __init__(self, run_dir: Path, judge: str, labeller: str) -> None:
        self.path = labels_path(run_dir, judge, labeller)
        self.labeller = labeller
        self._lock = threading.Lock()
        if self.path.is_file():  # a line torn by a crash is dropped, so the next label starts a line of its own
            read_appended_jsonl(self.path, repair=True)

    def append(self, label: dict[str, Any]) -> dict[str, Any]:
        """Save one label (a new line; fsynced before returning)."""
        line = {**label, "labeller": self.labeller, "given_at": round(time.time(), 3)}
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            no_follow.make_folders(self.path.parent)
            fd = no_follow.open_fd(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        return line

    def latest(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        """The last label given per (case, system, criterion), in the order first given."""
        return latest_labels(self.path)


def latest_labels(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    if not path.is_file():
        return {}
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for number, data in read_appended_jsonl(path).values:
        try:
            key = (str(data["case_id"]), str(data["system"]), str(data["criterion"]))
        except (KeyError, TypeError):
            raise DataError("not a label (case_id, system, criterion, score)", file=path, line=number) from None
        out[key] = {**data, "_line": number}
    return out
