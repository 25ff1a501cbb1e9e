"""User-facing errors. The CLI prints them as one line (no traceback) and exits non-zero."""

from __future__ import annotations

from pathlib import Path


class AtelierError(Exception):
    """Bad input or configuration the user can fix. Its message is the whole story."""


class DataError(AtelierError):
    """A data file is missing, corrupted or does not match its schema."""

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        self.detail = message
        where = ""
        if self.file:
            where = self.file + (f":{line}" if line is not None else "")
        if field:
            where = f"{where} field '{field}'" if where else f"field '{field}'"
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(AtelierError):
    """A recipe or a setting is invalid."""


class EpisodeFailure(Exception):
    """Mixed into an error that fails the episode wherever it is raised: no step falls back past it,
    and a judge's call that raises it is not a failed judgment (agents/judges/contract.py) — a replay
    asked for what it never recorded (`ReplayMiss`), a local model server that died (`LocalServerDied`)."""
