"""JSON that comes from outside the program — data files, metric inputs, run folders — parsed with
one `DataError` naming the file and line for anything that is not JSON, including nesting too
deep for the parser (a line of 200,000 brackets) and bytes that are not UTF-8; and records that
do not validate reported the same way, naming the field (`validation_error`). Settings a user
wrote (recipes, options) are validated strictly, as the file spells them (`validate_strictly`).

Append-only JSON Lines files (a run's results and ledger) get one more rule: every complete line
ends with a newline, so a last line without one was torn by a process that died while writing
it. `read_appended_jsonl` drops such a line (it was never finished) and, with `repair`, cuts it
from the file so the next append starts on a line of its own; any other bad line is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, SecretStr, ValidationError

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import DataError


def parse_json(text: str | bytes, *, file: str | Path | None = None, line: int | None = None) -> Any:
    """`json.loads`, with every way the text can fail to be JSON reported as one DataError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:  # a line of a JSON Lines file, or the line within the text
        raise DataError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=file, line=line or exc.lineno) from None
    except RecursionError:
        raise DataError("invalid JSON: nested too deeply to parse", file=file, line=line) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 at byte {exc.start}", file=file, line=line) from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300), ...
        raise DataError(f"invalid JSON: {exc}", file=file, line=line) from None


def read_json_file(path: str | Path, *, follow_links: bool = True) -> Any:
    """A whole file of JSON; an unreadable file is a DataError too. `follow_links=False` for a file
    Atelier keeps (a run folder's): a link in its place is refused (`no_follow`)."""
    path = Path(path)
    try:
        raw = no_follow.read_bytes(path) if not follow_links else path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", file=path) from None
    return parse_json(raw, file=path)


def _field_path(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "(record)"


def validation_error(exc: ValidationError, *, file: str | Path, line: int | None = None, prefix: str = "") -> DataError:
    """The first problem of a pydantic error as a DataError (the rest are usually consequences)."""
    first = exc.errors()[0]
    where = _field_path(first["loc"])
    return DataError(first["msg"], file=file, line=line, field=f"{prefix}{where}" if prefix else where)


ModelT = TypeVar("ModelT", bound=BaseModel)


def _as_json(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    raise TypeError(f"a {type(value).__name__} value is not valid here")


def validate_strictly(model: type[ModelT], data: Any) -> ModelT:
    """`model` from settings as a TOML or JSON file spells them: `true` is not a number, `2.5` or
    `"3"` not an integer, `1` not a boolean (pydantic's lax mode takes all four); strings still
    become paths and secrets. Raises pydantic's ValidationError, or TypeError for a value JSON
    cannot hold (a TOML date)."""
    return model.model_validate_json(json.dumps(data, default=_as_json), strict=True)


@dataclass
class AppendedLines:
    """The parsed lines of an append-only JSON Lines file, with their line numbers."""

    values: list[tuple[int, Any]] = field(default_factory=list)
    torn_line: int | None = None  # the number of a last line dropped because it was never finished


def read_appended_jsonl(path: str | Path, *, repair: bool = False) -> AppendedLines:
    """Every line of an append-only JSON Lines file. A torn last line (no newline, not JSON) is
    dropped — with `repair` also from the file; a last line complete but for its newline gets one."""
    path = Path(path)
    out = AppendedLines()
    try:
        raw = no_follow.read_bytes(path)  # a file Atelier appends to: never through a link
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", file=path) from None
    lines = raw.split(b"\n")
    tail = lines.pop()  # what follows the last newline: empty when the file ends cleanly
    for number, line in enumerate(lines, start=1):
        if line.strip():
            out.values.append((number, parse_json(line, file=path, line=number)))
    if not tail.strip():
        return out
    number = len(lines) + 1
    try:
        out.values.append((number, json.loads(tail)))
    except (ValueError, RecursionError):
        out.torn_line = number
    if repair:
        with no_follow.open_file(path, "r+b") as fh:
            if out.torn_line is None:
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            else:
                fh.truncate(len(raw) - len(tail))
            fh.flush()
            os.fsync(fh.fileno())
    return out
