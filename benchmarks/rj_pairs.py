"""Response–judgment pairs from a file, added to cases' gold (BESPOKE judge shots for benchmarks
that have none).

`atelier simulate feedback` writes such a file: JSON Lines, one record per rated response,
`{"case_id", "system", "rj_pairs": [{"response", "score", "feedback", "criterion"}, ...]}`.
A recipe points at it with `[benchmark] rj_pairs_file`; the pairs join `Case.gold.rj_pairs`, which
only judges see.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from atelier.benchmarks.case import Case, RJPair
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.loaders._records import RawRecord, existing_path, read_jsonl


class RJPairsRecord(RawRecord):
    case_id: str = Field(min_length=1)
    system: str | None = Field(default=None, description="The system whose response was rated.")
    rj_pairs: list[RJPair] = Field(min_length=1)


def read_rj_pairs(path: Path) -> dict[str, list[RJPair]]:
    by_case: dict[str, list[RJPair]] = {}
    for record in read_jsonl(existing_path(path, "rj_pairs_file"), RJPairsRecord):
        by_case.setdefault(record.case_id, []).extend(record.rj_pairs)
    return by_case


def with_rj_pairs(cases: list[Case], path: Path) -> list[Case]:
    """The cases with the file's pairs appended to their gold R-J pairs (cases the file does not
    cover are returned unchanged). A file covering none of the cases is an error: wrong file."""
    pairs = read_rj_pairs(path)
    if cases and not any(c.id in pairs for c in cases):
        raise DataError(
            f"no R-J pairs for any of the {len(cases)} cases (e.g. {cases[0].id!r})", file=path, field="case_id"
        )
    out = []
    for case in cases:
        extra = pairs.get(case.id)
        if extra:
            gold = case.gold.model_copy(update={"rj_pairs": [*case.gold.rj_pairs, *extra]})
            case = case.model_copy(update={"gold": gold})
        out.append(case)
    return out
