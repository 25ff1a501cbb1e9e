"""A protocol's contract, clause by clause: what every run and `atelier check` hold a system to.

Each protocol writes its clauses once, beside what it is a contract of (memory/contract.py,
graphs/contract.py, agents/judges/contract.py, benchmarks/contract.py,
agents/models/answer_contract.py), as `ContractClause`s and the functions that check them. Two
users call those same functions:

- every run, on every call (cheaply): a broken clause is a degradation of the clause's `kind`,
  its detail naming the protocol and the clause; where nothing trustworthy is left, the episode or
  the judgment fails with `ContractBroken` (the run's summary and exit code say so);
- `atelier check PROTOCOL REF` (runs/studies/conformance), on synthetic inputs, prints each clause
  by the same name, held or broken.

Clauses whose `kind` is None are properties a run cannot see from one call (ingest idempotent,
the state rebuilt after a kill, junk model output gated): only `atelier check` tests them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from atelier.benchmarks.common.degradation import Degradation, DegradationKind, degradation
from atelier.benchmarks.common.errors import AtelierError


@dataclass(frozen=True)
class ContractClause:
    protocol: str  # memory | pipeline | judge | benchmark | provider
    name: str  # as `atelier check` prints it, e.g. "budget respected"
    kind: DegradationKind | None = None  # what a run records when it is broken; None: `atelier check` only

    @property
    def label(self) -> str:
        return f"{self.protocol} contract, {self.name!r}"

    def broken(self, detail: str, step: str, count: int = 1) -> Degradation:
        """The degradation a run records for this clause broken at `step`."""
        if self.kind is None:
            raise ValueError(f"{self.label} is checked by `atelier check` only")
        return degradation(self.kind, step, f"{self.label} broken: {detail}", count=count)


class ContractBroken(AtelierError):
    """A clause broken where nothing trustworthy is left to score: the episode (or the judgment)
    fails with this reason, and the run records `degradation` as well. `detail` is what broke it,
    `subject` what did (a memory's context, ...), for `atelier check` to go on with."""

    def __init__(self, clause: ContractClause, detail: str, step: str, subject: Any = None) -> None:
        self.clause = clause
        self.detail = detail
        self.subject = subject
        self.degradation = clause.broken(detail, step)
        super().__init__(self.degradation.detail)


@dataclass(frozen=True)
class FieldProblem:
    """What breaks a model's schema once its fields are validated again: the first invalid field
    (`missing`, else `message` and the value `shown`), or `unwritable` (why it cannot be JSON)."""

    field: str = ""
    missing: bool = False
    message: str = ""
    shown: str = ""
    unwritable: str = ""


def field_problem(value: BaseModel) -> FieldProblem | None:
    """Why `value`'s fields break its own schema (validated again as its class validates them, then
    written as JSON, as a run records it): a field set after it was made, or a model made with
    `model_construct`, is not validated by pydantic. None when they hold."""
    try:
        type(value).model_validate(value.model_dump(warnings=False)).model_dump_json()
    except ValidationError as exc:
        return error_problem(exc)
    except PydanticSerializationError as exc:
        return FieldProblem(unwritable=str(exc))
    return None


def error_problem(error: ValidationError) -> FieldProblem:
    """`error`'s first invalid field."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return FieldProblem(field=field, missing=True)
    said = repr(first.get("input"))
    return FieldProblem(field=field, message=first["msg"], shown=said if len(said) <= 80 else said[:79] + "…")
