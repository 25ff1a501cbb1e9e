"""Reading raw data files into pydantic record models, with one clear error per bad file.

Whatever is wrong with a file (bad gzip, bad UTF-8, bad JSON, a missing or mistyped field), the
reader raises exactly one `DataError` naming the file, the line (JSON Lines) or the record index
(JSON arrays and objects) and the field. Loaders then build `Case`s from validated records only.
"""

from __future__ import annotations

import gzip
import random
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import parse_json, validation_error

RecordT = TypeVar("RecordT", bound=BaseModel)
ItemT = TypeVar("ItemT")


class RawRecord(BaseModel):
    """Base of the raw-record models: unknown upstream fields are ignored, known ones are typed."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


def read_text(path: Path) -> str:
    """The file's text; `.gz` files are decompressed. Corrupt compression or encoding -> DataError."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", file=path) from None
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"corrupt gzip data: {exc}", file=path) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 at byte {exc.start}", file=path) from None


def text_lines(text: str) -> list[str]:
    """The lines of a text file: split at "\n" only (a trailing "\r" dropped), never at the other
    line breaks `str.splitlines` knows (U+2028, U+0085, form feed...), which JSON writes raw inside
    strings (`json.dumps(..., ensure_ascii=False)`) and which are no line ends to an editor either."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def validate(model: type[RecordT], data: Any, *, file: Path, line: int | None = None, prefix: str = "") -> RecordT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file=file, line=line, prefix=prefix) from None


def read_jsonl(path: Path, model: type[RecordT]) -> list[RecordT]:
    """Every non-blank line of a JSON Lines file (optionally gzipped) as a `model`. A file without
    a single record is an error: every data file a loader reads is meant to hold some."""
    records = []
    for number, line in enumerate(text_lines(read_text(path)), start=1):
        if line.strip():
            records.append(validate(model, parse_json(line, file=path, line=number), file=path, line=number))
    if not records:
        raise DataError("holds no records (the file is empty)", file=path)
    return records


def read_json(path: Path) -> Any:
    return parse_json(read_text(path), file=path)


def read_json_array(path: Path, model: type[RecordT]) -> list[RecordT]:
    """A JSON array of records; errors name the record index, e.g. field `[3].turns.0.utterance`."""
    return validate_array(read_json(path), model, file=path)


def validate_array(data: Any, model: type[RecordT], *, file: Path) -> list[RecordT]:
    """Parsed JSON that must be an array of `model` records."""
    if not isinstance(data, list):
        raise DataError(f"expected a JSON array of records, found {type(data).__name__}", file=file)
    return [validate(model, item, file=file, prefix=f"[{i}].") for i, item in enumerate(data)]


def read_json_object(path: Path, model: type[RecordT]) -> dict[str, RecordT]:
    """A JSON object mapping keys to records; errors name the key, e.g. field `[Paris].extract`."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(f"expected a JSON object of records, found {type(data).__name__}", file=path)
    return {key: validate(model, item, file=path, prefix=f"[{key}].") for key, item in data.items()}


def read_json_or_jsonl(path: Path, model: type[RecordT]) -> list[RecordT]:
    """Records from either a JSON array or JSON Lines, told apart by the first character."""
    if read_text(path).lstrip().startswith("["):
        return read_json_array(path, model)
    return read_jsonl(path, model)


def index_unique(records: Sequence[ItemT], key: Any, *, file: Path, field: str) -> dict[Any, ItemT]:
    """Records by `key(record)`; a duplicate key is a data error (ids must identify records)."""
    out: dict[Any, ItemT] = {}
    for i, record in enumerate(records):
        k = key(record)
        if k in out:
            raise DataError(f"duplicate {field} {k!r} (record {i})", file=file, field=field)
        out[k] = record
    return out


def deterministic_subset(items: Sequence[ItemT], limit: int | None, *, seed: int, salt: str) -> list[ItemT]:
    """`limit` items drawn without replacement by `random.Random(f"{salt}:{seed}")`, kept in their
    original order. The same (items, limit, seed, salt) always gives the same subset; a different seed
    gives another sample of the whole data set, not just its first N items."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    chosen = sorted(random.Random(f"{salt}:{seed}").sample(range(len(items)), limit))
    return [items[i] for i in chosen]


def existing_path(path: Path, option: str, *, directory: bool = False) -> Path:
    """A path the user gave as loader option `option`, checked to exist (a file, or a directory)."""
    if directory and not path.is_dir():
        raise ConfigError(f"option {option}={path} is not a directory")
    if not directory and not path.is_file():
        raise ConfigError(f"option {option}={path} does not exist or is not a file")
    return path
