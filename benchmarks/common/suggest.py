""" "Did you mean": the known names closest to a mistyped one, for every unknown-name error, and
what a pydantic model takes at an error's location (its keys, the option a value belongs to)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def closest(word: str, known: Iterable[str], n: int = 2) -> list[str]:
    """The known names closest to `word` (difflib's ratio >= 0.6; case is ignored), best first."""
    by_folded: dict[str, str] = {}
    for name in known:
        by_folded.setdefault(str(name).casefold(), str(name))
    matches = difflib.get_close_matches(str(word).casefold(), list(by_folded), n=n, cutoff=0.6)
    return [by_folded[m] for m in matches]


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`did you mean 'concurrency'?` (or `'a' or 'b'?`), or "" when nothing is close."""
    matches = closest(word, known)
    if not matches:
        return ""
    return "did you mean " + " or ".join(repr(m) for m in matches) + "?"


def _members(annotation: Any) -> list[Any]:
    """An annotation's alternatives, Annotated and Optional unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def literal_values(annotation: Any) -> list[Any]:
    """The values a Literal annotation (inside Optional, unions, lists) allows."""
    values: list[Any] = []
    for member in _members(annotation):
        if get_origin(member) is Literal:
            values.extend(get_args(member))
        elif get_origin(member) in (list, tuple, set, frozenset):
            values.extend(v for arg in get_args(member) for v in literal_values(arg))
    return values


def fields_at(model: Any, loc: Sequence[Any]) -> list[str]:
    """The keys a pydantic model takes at `loc` (a ValidationError's location: field names, list
    indices, dict keys, a discriminated union's tag), by field name and alias; [] where it cannot tell."""
    current = [model]
    for part in loc:
        following: list[Any] = []
        for member in (m for annotation in current for m in _members(annotation)):
            origin = get_origin(member)
            if isinstance(part, int) and origin in (list, tuple):
                following.extend(get_args(member)[:1])
            elif origin is dict and len(get_args(member)) == 2:
                following.append(get_args(member)[1])
            elif isinstance(member, type) and issubclass(member, BaseModel):
                field = member.model_fields.get(part) if isinstance(part, str) else None
                if field is not None:
                    following.append(field.annotation)
                elif any(part in literal_values(f.annotation) for f in member.model_fields.values()):
                    following.append(member)  # the tag of a discriminated union: this member
        current = following
    keys: set[str] = set()
    for member in (m for annotation in current for m in _members(annotation)):
        if isinstance(member, type) and issubclass(member, BaseModel):
            keys.update(name for name in member.model_fields)
            keys.update(f.alias for f in member.model_fields.values() if f.alias)
    return sorted(keys)


def value_homes(value: Any, configs: Mapping[str, type[BaseModel]]) -> list[str]:
    """Where `value` is a valid option value instead: `retrieval with method = 'bm25'` for a
    backend named "bm25" (the configs' tag fields themselves are left out)."""
    homes = []
    folded = str(value).casefold()
    for name, config in configs.items():
        for key, field in config.model_fields.items():
            allowed = literal_values(field.annotation)
            if name in allowed:
                continue  # the tag field (`backend = "retrieval"`)
            hit = next((v for v in allowed if isinstance(v, str) and v.casefold() == folded), None)
            if hit is not None:
                homes.append(f"{name} with {key} = {hit!r}")
    return homes
