"""A run folder's layout: where each of its files lives, its resolved config, and its episodes' keys."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_json_file, validation_error
from atelier.runs.folder.results import result_key


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def results(self) -> Path:
        return self.path / "results.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.jsonl"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints.sqlite"


def expected_keys(case_ids: list[str], systems: list[str], epochs: int = 1) -> list[str]:
    """The episodes of a recipe: every (case, system, epoch); epochs outermost, then systems."""
    return [
        result_key(case_id, system, epoch)
        for epoch in range(1, epochs + 1)
        for system in systems
        for case_id in case_ids
    ]


class _StoredConfig(BaseModel):
    """What a resumed run reads back from its folder's config.json."""

    model_config = ConfigDict(extra="allow")

    run_id: str | None = None
    started_at: str | None = None
    recipe: dict[str, Any] | None = None
    case_digests: dict[str, str] | None = None  # case id -> `case_digest` of the case as the run first loaded it


def case_digest(case: BaseModel) -> str:
    """The sha256 of a case as loaded (its history, persona, query and gold): a resumed run's cases
    must be the ones it began with, or its checkpoints and memory would hold the old ones."""
    return hashlib.sha256(case.model_dump_json().encode("utf-8")).hexdigest()


def stored_config(path: Path) -> _StoredConfig | None:
    if not os.path.lexists(path):
        return None
    try:
        return _StoredConfig.model_validate(read_json_file(path, follow_links=False))
    except no_follow.UnsafeFileError:
        raise
    except DataError as exc:
        problem, line = exc.detail, exc.line
    except ValidationError as exc:
        error = validation_error(exc, file=path)
        problem, line = f"field '{error.field}': {error.detail}", None
    raise DataError(
        f"{problem}; the run folder's {path.name} is damaged: restore it, or choose a new --out folder",
        file=path,
        line=line,
    )


def load_run_config(path: Path) -> dict[str, Any]:
    """A run folder's config.json (a damaged one is an error naming it), or an error saying it is none."""
    stored = stored_config(Path(path) / "config.json")
    if stored is None:
        raise ConfigError(f"{path} is not a run folder (no config.json)")
    return stored.model_dump()
