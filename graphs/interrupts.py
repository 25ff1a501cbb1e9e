"""Asking a person (or the simulated user) through a LangGraph `interrupt`, until the answer is usable.

A resume value that does not parse does not fail the thread: the node interrupts again with the
same request and the problem in it, so the thread stays interrupted and the next resume is read
as the answer to that. (LangGraph matches resume values to a node's `interrupt` calls in order,
so each retry is a new call in the same node.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from langgraph.types import interrupt
from pydantic import BaseModel, ValidationError

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")


def problem_of(exc: Exception) -> str:
    """One line saying what was wrong with a resume value."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(exc)


def ask_until_usable(request: R, parse: Callable[[Any], T], expected: str) -> T:
    """`parse(interrupt(request))`; while the answer cannot be parsed, ask again with `problem` set on
    the request (its model has a `problem` field): what was wrong, and the shape `expected`."""
    while True:
        value = interrupt(request)
        try:
            return parse(value)
        except (ValidationError, ValueError) as exc:
            request = request.model_copy(
                update={
                    "problem": f"the answer {value!r} could not be used ({problem_of(exc)}); resume with {expected}"
                }
            )


def ask_as_data_until_usable(request: R, parse: Callable[[Any], T], expected: str) -> T:
    """`ask_until_usable`, the request shown as plain data (`request.model_dump()`): what a person
    sees in Studio, and what a checkpoint holds without knowing the request's type."""
    while True:
        value = interrupt(request.model_dump(mode="json"))
        try:
            return parse(value)
        except (ValidationError, ValueError) as exc:
            request = request.model_copy(
                update={
                    "problem": f"the answer {value!r} could not be used ({problem_of(exc)}); resume with {expected}"
                }
            )
