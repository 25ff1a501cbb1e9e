"""A judgment as a researcher reads it: per criterion its score, weight and the judge's explanation
as a sentence; the claims a fact-checker checked with their source and verdict; a simulated user's
feedback; the aspects an answer covered — not the judge's nested details as key/value tables.

Each reader recognises one judge's details by their shape (so a judge under a label, or a rescore,
reads the same) and returns a `Reading`; details no reader knows (a plugin judge's) are read by
`generic`, which writes every leaf as a `path: value` line. The raw details stay one click away on
the page; nothing here drops a figure the details hold, it only orders and names them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field


class Line(BaseModel):
    """One criterion (or aspect) of a judgment."""

    name: str
    text: str | None = Field(default=None, description="What the criterion asks.")
    score: float | None = None
    out_of: float | None = None
    weight: float | None = Field(default=None, description="Its weight within its group (0-1).")
    why: str | None = Field(default=None, description="The judge's explanation of the score.")
    note: str | None = Field(default=None, description="Why the criterion matters, or a fact about it.")


class Group(BaseModel):
    """Criteria under one heading: a PQR dimension, an AEPD repeat."""

    title: str
    score: float | None = None
    out_of: float | None = None
    weight: float | None = None
    prose: str | None = None
    lines: list[Line] = Field(default_factory=list)


class Claim(BaseModel):
    """A claim checked against a source (PQR's R), or a gold fact looked for (BESPOKE's recall)."""

    claim: str
    verdict: str
    source: str | None = None
    url: str | None = None
    reason: str | None = None


class Reading(BaseModel):
    judge: str
    kind: str = Field(description="Which reader read it: pqr, bespoke, lampqa_aspects, lampqa_pairwise, aepd, generic.")
    headline: list[tuple[str, str]] = Field(default_factory=list, description="The figures of the summary line.")
    groups: list[Group] = Field(default_factory=list)
    claims_title: str | None = None
    claims: list[Claim] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Sentences: how the score is made, what was left out.")


def _number(value: Any, digits: int = 2) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ----------------------------------------------------------------------------- PQR


def _pqr_axis(name: str, axis: Mapping[str, Any]) -> list[Group]:
    groups = []
    for dimension, entry in (axis.get("dimensions") or {}).items():
        lines = [
            Line(
                name=str(c.get("id") or dimension),
                text=c.get("criterion"),
                score=_float(c.get("score")),
                out_of=10,
                weight=_float(c.get("weight")),
                why=c.get("analysis") or None,
                note=c.get("explanation") or None,
            )
            for c in entry.get("criteria") or []
            if isinstance(c, Mapping)
        ]
        groups.append(
            Group(
                title=f"{name} · {dimension}",
                score=_float(entry.get("score")),
                out_of=10,
                weight=_float(entry.get("weight")),
                lines=lines,
            )
        )
    if groups and axis.get("weights_analysis"):
        groups[0].prose = f"Why {name}'s dimensions weigh as they do: {axis['weights_analysis']}"
    return groups


def read_pqr(judge: str, details: Mapping[str, Any]) -> Reading | None:
    axes = [a for a in ("P", "Q") if isinstance(details.get(a), Mapping) and "dimensions" in details[a]]
    facts = details.get("R") if isinstance(details.get("R"), Mapping) else None
    if not axes and not (facts and "claims" in facts):
        return None
    reading = Reading(judge=judge, kind="pqr")
    for axis in (*axes, "R"):
        score = _float((details.get(axis) or {}).get("score")) if isinstance(details.get(axis), Mapping) else None
        if score is not None:
            reading.headline.append((axis, _number(score)))
    for axis in axes:
        reading.groups += _pqr_axis(axis, details[axis])
        skipped = details[axis].get("skipped_criteria")
        if skipped:
            reading.notes.append(
                f"{axis}: {skipped} criteria left unscored (coverage {_number(details[axis].get('coverage'))})."
            )
    if facts:
        reading.headline += [
            ("FA", _number(facts.get("factual_accuracy"))),
            ("CC", _number(facts.get("citation_coverage"))),
        ]
        reading.claims_title = (
            f"R: {facts.get('n_supported', 0)} of {facts.get('fa_denominator', facts.get('n_total', 0))} checked "
            f"claims supported by their source; {facts.get('n_cited', 0)} of {facts.get('n_total', 0)} claims cited"
        )
        reading.claims = [
            Claim(
                claim=str(c.get("claim", "")),
                verdict=str(c.get("verdict") or "not checked"),
                source=c.get("source"),
                url=c.get("url"),
                reason=c.get("reason") or None,
            )
            for c in facts.get("claims") or []
            if isinstance(c, Mapping)
        ]
        if facts.get("n_unreadable"):
            reading.notes.append(
                f"R: {facts['n_unreadable']} cited source(s) could not be read; their claims count as "
                f"{facts.get('unreadable_claims_are', 'unsupported')}."
            )
        if facts.get("no_cited_claims"):
            reading.notes.append("R: the response cites no claim.")
    if details.get("score_is"):
        reading.notes.append(f"Score: {details['score_is']}.")
    return reading


# ----------------------------------------------------------------------------- BESPOKE


def read_bespoke(judge: str, details: Mapping[str, Any]) -> Reading | None:
    scaled, feedback = details.get("scaled"), details.get("feedback")
    if not isinstance(scaled, Mapping) or not isinstance(feedback, Mapping):
        return None
    given = details.get("reasoning")
    reasoning: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    reading = Reading(judge=judge, kind="bespoke")
    reading.groups.append(
        Group(
            title="the user's criteria (1-5, x20)",
            score=_float(details.get("personalization")),
            out_of=100,
            lines=[
                Line(
                    name=name,
                    score=_float(value),
                    out_of=100,
                    why=feedback.get(name) or None,
                    note=(f"Reasoning: {reasoning[name]}" if reasoning.get(name) else None),
                )
                for name, value in scaled.items()
            ],
        )
    )
    reading.headline = [(name, _number(value, 0)) for name, value in scaled.items()]
    gold = details.get("gold_information") or []
    if gold:
        present = sum(1 for g in gold if isinstance(g, Mapping) and g.get("present"))
        reading.claims_title = (
            f"gold information: {present} of {len(gold)} facts present (recall {_number(details.get('recall'))})"
        )
        reading.claims = [
            Claim(claim=str(g.get("claim", "")), verdict="present" if g.get("present") else "missing")
            for g in gold
            if isinstance(g, Mapping)
        ]
        reading.headline.append(("recall", _number(details.get("recall"))))
    if details.get("empty_gold"):
        reading.notes.append("The case has no gold information: recall is not measured.")
    if details.get("score_is"):
        reading.notes.append(f"Score: {details['score_is']}.")
    return reading


# ----------------------------------------------------------------------------- LaMP-QA


def read_lampqa_aspects(judge: str, details: Mapping[str, Any]) -> Reading | None:
    aspects = details.get("aspects")
    if not isinstance(aspects, list) or not all(isinstance(a, Mapping) and "match_score" in a for a in aspects):
        return None
    met = sum(1 for a in aspects if (_float(a.get("match_score")) or 0) > 0)
    reading = Reading(judge=judge, kind="lampqa_aspects", headline=[("aspects met", f"{met}/{len(aspects)}")])
    reading.groups.append(
        Group(
            title="the user's aspects (0 not addressed, 1 partly, 2 fully)",
            lines=[
                Line(
                    name=str(a.get("aspect", "")),
                    score=_float(a.get("match_score")),
                    out_of=2,
                    why=a.get("reason") or a.get("explanation") or None,
                )
                for a in aspects
            ],
        )
    )
    reading.notes.append("Score: the mean aspect score over 2 (LaMP-QA's normalized mean).")
    return reading


_ORDER = {"response_1": "the first response shown", "response_2": "the second response shown", "tie": "neither (a tie)"}


def read_lampqa_pairwise(judge: str, details: Mapping[str, Any]) -> Reading | None:
    if "first_order" not in details or "swapped_order" not in details:
        return None
    baseline = details.get("baseline", "the baseline")
    reading = Reading(
        judge=judge,
        kind="lampqa_pairwise",
        headline=[("win", _number(details.get("score")))] + ([("order flip", "yes")] if details.get("flipped") else []),
    )
    reading.notes.append(
        f"Against {baseline}: with this response shown first the judge preferred "
        f"{_ORDER.get(str(details['first_order']), details['first_order'])} (outcome {_number(details.get('outcome_first'))}); "
        f"with the order swapped, {_ORDER.get(str(details['swapped_order']), details['swapped_order'])} "
        f"(outcome {_number(details.get('outcome_swapped'))}). The score is the mean of the two."
        + (" The preference followed the position, not the response (an order flip)." if details.get("flipped") else "")
    )
    return reading


# ----------------------------------------------------------------------------- AEPD


def read_aepd(judge: str, details: Mapping[str, Any]) -> Reading | None:
    repeats = details.get("repeats")
    if not isinstance(repeats, list) or not all(isinstance(r, Mapping) and "aspects" in r for r in repeats):
        return None
    reading = Reading(judge=judge, kind="aepd")
    for index, repeat in enumerate(repeats, start=1):
        lines = [
            Line(
                name=str(a.get("aspect", "")),
                score=1.0 if a.get("personalized") else 0.0,
                out_of=1,
                why=f"“{a['content']}”" if a.get("content") else None,
                note=("personalized to: " + "; ".join(a["profile_ids"]))
                if a.get("profile_ids")
                else "not personalized",
            )
            for a in repeat.get("aspects") or []
            if isinstance(a, Mapping)
        ]
        figures = ", ".join(
            f"{name} {_number(repeat.get(name))}"
            for name in ("p_score", "d_score", "npp", "npcl", "ar", "clu")
            if name in repeat
        )
        reading.groups.append(
            Group(
                title=f"annotation {index}" + (f": {repeat['topic']}" if repeat.get("topic") else ""),
                prose=figures or None,
                lines=lines,
            )
        )
    first = repeats[0] if repeats else {}
    reading.headline = [(name, _number(first.get(name))) for name in ("p_score", "d_score") if name in first]
    if len(repeats) > 1:
        reading.notes.append(f"{len(repeats)} annotations; the score is the mean of their P_score.")
    return reading


# ----------------------------------------------------------------------------- anything else


def _leaves(value: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list) and value and any(isinstance(v, (Mapping, list)) for v in value):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, f"{path}[{i}]")]
    if isinstance(value, list):
        return [(path, ", ".join(_number(v) for v in value) or "(none)")]
    return [(path, _number(value))]


def read_generic(judge: str, details: Mapping[str, Any]) -> Reading:
    """Every leaf of the details as one line: `path: value` (long texts as they are)."""
    lines = [Line(name=path, why=value) for path, value in _leaves(details)]
    return Reading(judge=judge, kind="generic", groups=[Group(title="details", lines=lines)] if lines else [])


READERS: tuple[Callable[[str, Mapping[str, Any]], Reading | None], ...] = (
    read_pqr,
    read_bespoke,
    read_lampqa_aspects,
    read_lampqa_pairwise,
    read_aepd,
)


def read_judgment(judgment: Any) -> Reading:
    """A `JudgeResult` (or its JSON) as prose: the first reader that knows its details' shape."""
    data = judgment if isinstance(judgment, Mapping) else judgment.model_dump(mode="json")
    judge, details = str(data.get("judge")), data.get("details") or {}
    for reader in READERS:
        reading = reader(judge, details)
        if reading is not None:
            break
    else:
        reading = read_generic(judge, details)
        criteria = data.get("criteria") or {}
        reading.headline = [(name, _number(value)) for name, value in list(criteria.items())[:6]]
    for flag in data.get("flags") or []:
        reading.notes.append(f"Flag: {flag}.")
    return reading


def raw_json(value: Any) -> str:
    """The JSON the page shows one click away."""
    data = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)
