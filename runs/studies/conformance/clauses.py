"""A clause of a protocol's contract, checked: held, broken or not applicable, with its evidence."""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["held", "broken", "n/a"]

EXIT_HELD = 0
EXIT_BROKEN = 3


@dataclass(frozen=True)
class Clause:
    name: str
    verdict: Verdict
    evidence: str

    @property
    def broken(self) -> bool:
        return self.verdict == "broken"


def held(name: str, evidence: str) -> Clause:
    return Clause(name, "held", evidence)


def broken(name: str, evidence: str) -> Clause:
    return Clause(name, "broken", evidence)


def not_applicable(name: str, why: str) -> Clause:
    return Clause(name, "n/a", why)


def verdict(name: str, ok: bool, evidence: str) -> Clause:
    return Clause(name, "held" if ok else "broken", evidence)


async def checked(name: str, check: Callable[[], Awaitable[Clause]]) -> Clause:
    """`check()`, or the clause broken by the exception the system under test raised, named with
    where it was raised (the innermost frame outside the kit)."""
    try:
        return await check()
    except Exception as exc:  # noqa: BLE001 - a system under test may raise anything: that is the evidence
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/conformance/" not in f.filename]
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        said = " ".join(str(exc).split())
        said = said if len(said) <= 900 else said[:899] + "…"  # whole: the advice ends a long message
        return broken(name, f"raised {type(exc).__name__}: {said}{where}")


@dataclass
class Report:
    """What `atelier check` prints: the protocol, the system checked, each clause."""

    protocol: str
    ref: str
    clauses: list[Clause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def broken(self) -> list[Clause]:
        return [c for c in self.clauses if c.broken]

    @property
    def exit_code(self) -> int:
        return EXIT_BROKEN if self.broken else EXIT_HELD

    def lines(self) -> list[str]:
        marks = {"held": "held  ", "broken": "BROKEN", "n/a": "n/a   "}
        out = [f"atelier check {self.protocol} {self.ref} (scripted model)"]
        out += [f"  {marks[c.verdict]}  {c.name}: {c.evidence}" for c in self.clauses]
        out += [f"  note: {note}" for note in self.notes]
        counted = [c for c in self.clauses if c.verdict != "n/a"]
        if self.broken:
            names = ", ".join(c.name for c in self.broken)
            out.append(f"{len(self.broken)} of {len(counted)} clauses broken: {names}")
        else:
            out.append(
                f"all {len(counted)} clauses held"
                + (f" ({len(self.clauses) - len(counted)} n/a)" if len(counted) < len(self.clauses) else "")
            )
        return out

    def as_json(self) -> dict:
        return {
            "protocol": self.protocol,
            "ref": self.ref,
            "clauses": [{"name": c.name, "verdict": c.verdict, "evidence": c.evidence} for c in self.clauses],
            "notes": self.notes,
            "exit_code": self.exit_code,
        }
