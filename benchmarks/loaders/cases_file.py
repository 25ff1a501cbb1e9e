"""`jsonl`: a researcher's own cases, one `Case` per line of a JSON Lines file (the `Case` schema of
benchmarks/case.py: id, user_id, query, history, persona, gold, ...).

A recipe names the file as `[benchmark] path = "cases.jsonl"` (read from the recipe's folder), which
is this benchmark with `options.path`. A case's `benchmark` field is set to `jsonl`; a line that is
not a case is refused naming the file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import parse_json, validation_error
from atelier.benchmarks.loaders._records import deterministic_subset
from atelier.benchmarks.registry import PDR_SETTINGS, BenchmarkSpec, LoadRequest, register_benchmark

BENCHMARK = "jsonl"


class CasesFileOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path = Field(description="A JSON Lines file, one case (the Case schema) per line.")


def read_cases(path: Path) -> list[Case]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", file=path) from None
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        data = parse_json(line, file=path, line=number)
        try:
            case = Case.model_validate(data)
        except ValidationError as exc:
            problem = validation_error(exc, file=path, line=number)
            if isinstance(data, dict) and isinstance(data.get("id"), str):  # which case, as well as where
                said = f"case {data['id']!r}, field '{problem.field}': {problem.detail}"
                problem = DataError(said, file=path, line=number)
            raise problem from None
        if case.id in seen:
            raise DataError(f"case id {case.id!r} is repeated (first on line {seen[case.id]})", file=path, line=number)
        seen[case.id] = number
        cases.append(case.model_copy(update={"benchmark": BENCHMARK}))
    if not cases:
        raise DataError("no case in the file (one JSON object per line, in the Case schema)", file=path)
    return cases


def _load(request: LoadRequest) -> list[Case]:
    assert isinstance(request.options, CasesFileOptions)
    cases = read_cases(request.options.path)
    # `limit` draws a seeded subset, as every benchmark's loader does (not the file's first cases)
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=BENCHMARK)


SPEC = register_benchmark(
    BenchmarkSpec(
        name=BENCHMARK,
        description="Your own cases: a JSON Lines file, one Case per line ([benchmark] path = ...)",
        splits=("all",),
        settings=PDR_SETTINGS,
        load=_load,
        options=CasesFileOptions,
        default_setting="context",
    )
)
