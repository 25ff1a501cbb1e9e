"""AEPD judge (Hiramatsu et al., 2025): aspect-based personalization and diversification of a turn.

As in the authors' pilot (their prompt, risa-hira/AEPD `prompts.md`), the model annotates the turn:
the topic t of the user's utterance; as many possible aspects of t as it can think of (A'_all); for each,
the numbers of the user's profile statements that make it personal (A'_per; empty when none); and
for the aspects the response covers (A_all), the response text about it. Word counts (whitespace
split, as the authors' code) and every score (NPP, NPCL, P_score, AR, CLU, D_score) are computed by
`benchmarks.metrics.aepd`. The headline is P_score; D_score and the rest are in `criteria`.

The profile is the user's PTKB (TREC iKAT, as in the paper); for cases without one, their stated
preferences, else the facets of their structured persona. Model role: `aepd_judge`.

Degenerate output: an annotation whose topic or an aspect's name is empty or punctuation only, that
names fewer distinct possible aspects than `min_aspects`, or that quotes a span not found in the
response is asked again once (a `judge_output_gated` degradation). The paper states no number of
aspects; its aspects are "the various facets" of a topic and D_score rewards covering "diverse
aspects", so at least 2: with one possible aspect AR and CLU are 1 by construction and D_score is 1
whatever the response says. Still degenerate, the judgment fails with the reason, except for spans
not in the response: those are removed before scoring (their aspect counts as not covered) and
counted (`spans_removed`). A span is found in the response up to whitespace and case; a span the
model shortened with an ellipsis is found when its pieces are, in order.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model, model_validator

from atelier.agents.judges.base import (
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeFailed,
    JudgeResult,
    Requirement,
    ask_again_once,
    blank,
    has,
    quoted,
    register_judge,
)
from atelier.agents.judges.material import numbered, response_section
from atelier.agents.prompts import Section, build_messages, conversation_section
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import degradation
from atelier.benchmarks.metrics.aepd import AEPDInput, aepd_scores

ROLE = "aepd_judge"


def profile_statements(case: Case) -> list[tuple[str, str]]:
    """(id, text) of the user's profile: PTKB statements, else stated preferences, else persona facets."""
    for kind in ("ptkb", "preference"):
        found = [(e.id, e.text) for e in case.history if e.kind == kind]
        if found:
            return found
    if case.persona is not None:
        return [(path, f"{path.split(' > ')[-1]}: {value}") for path, value in case.persona.facets()]
    return []


class AEPDJudgeConfig(JudgeConfig):
    name: Literal["aepd"] = "aepd"
    min_aspects: int = Field(
        default=2,
        ge=2,
        le=60,
        description="At least this many distinct possible aspects per "
        "topic; fewer is a degenerate annotation (with one, D_score is 1 whatever the response).",
    )
    max_aspects: int = Field(default=25, ge=2, le=60, description="At most this many possible aspects per topic.")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> AEPDJudgeConfig:
        if self.min_aspects > self.max_aspects:
            raise ValueError(f"min_aspects ({self.min_aspects}) is above max_aspects ({self.max_aspects})")
        return self


class AspectAnnotation(BaseModel):
    """What the judge reads of one aspect of `annotation_model`'s answers."""

    aspect: str
    profile_statements: list[str]
    content: str


class TurnAnnotation(BaseModel):
    """What the judge reads of `annotation_model`'s answers."""

    topic: str
    aspects: list[AspectAnnotation]


def annotation_model(statements: int, min_aspects: int, max_aspects: int) -> type[TurnAnnotation]:
    number: Any = Literal[tuple(str(i) for i in range(1, statements + 1))]  # built at runtime: no static type
    aspect = create_model(
        "AspectAnnotation",
        __base__=AspectAnnotation,
        aspect=(str, Field(min_length=1, description="A short name for one facet or possible answer of the topic.")),
        profile_statements=(
            list[number],
            Field(description="Numbers of the profile statements this aspect is relevant to; empty when none."),
        ),
        content=(
            str,
            Field(
                description="The response's text about this aspect, copied from it; empty when the "
                "response does not cover the aspect."
            ),
        ),
    )
    return create_model(
        "TurnAnnotation",
        __base__=TurnAnnotation,
        topic=(str, Field(min_length=1, description="The topic t of the user's utterance.")),
        aspects=(
            list[aspect],
            Field(min_length=min_aspects, max_length=max_aspects, description="Every possible aspect of t."),
        ),
    )


# --------------------------------------------------------------------------- the gate

_ELLIPSIS = re.compile(r"\.\.\.+|…")


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def located(span: str, response: str) -> str | None:
    """The span as found in the response (its pieces joined, when the model shortened it with an
    ellipsis), or None when it is not there. Whitespace and case do not matter."""
    pieces = [p.strip() for p in _ELLIPSIS.split(span) if not blank(p)]
    if not pieces:
        return None
    haystack, position = _folded(response), 0
    for piece in pieces:
        found = haystack.find(_folded(piece), position)
        if found < 0:
            return None
        position = found + len(_folded(piece))
    return " ".join(pieces)


def _aspect_key(name: str) -> str:
    return _folded(name)


def structural_problems(annotation: TurnAnnotation, min_aspects: int) -> list[str]:
    """What makes an annotation unscorable: a blank topic or aspect name, too few distinct aspects."""
    problems = []
    if blank(annotation.topic):
        problems.append(f"the topic is empty or punctuation only ({quoted(annotation.topic)})")
    unnamed = [a.aspect for a in annotation.aspects if blank(a.aspect)]
    if unnamed:
        problems.append(f"{len(unnamed)} aspect name(s) are punctuation only (e.g. {quoted(unnamed[0])})")
    distinct = {_aspect_key(a.aspect) for a in annotation.aspects if not blank(a.aspect)}
    if len(distinct) < min_aspects:
        problems.append(f"{len(distinct)} distinct possible aspect(s) of the topic; at least {min_aspects} are needed")
    return problems


def spans_not_found(annotation: TurnAnnotation, response: str) -> list[str]:
    """The quoted spans (non-empty `content`) that are not in the response."""
    return [a.content for a in annotation.aspects if a.content.strip() and located(a.content, response) is None]


def annotation_problems(annotation: TurnAnnotation, response: str, min_aspects: int) -> list[str]:
    problems = structural_problems(annotation, min_aspects)
    missing = spans_not_found(annotation, response)
    if missing:
        problems.append(
            f"{len(missing)} quoted span(s) are not in the response (e.g. {quoted(missing[0])}); "
            "copy each aspect's content word for word from the response"
        )
    return problems


def annotation_messages(
    case: Case, response: SystemResponse, statements: list[tuple[str, str]]
) -> list[dict[str, str]]:
    sections = [Section("The user's personal profile", numbered([text for _, text in statements]), untrusted=True)]
    if case.query.previous_turns:
        sections.append(conversation_section(case.query.previous_turns))
    sections += [
        Section("The user's utterance", case.query.text, untrusted=True),
        response_section(response, "The system's response"),
    ]
    return build_messages(
        "You annotate conversational search turns for an aspect-based evaluation of personalization and "
        "diversification.",
        sections,
        "1. Determine the topic t of the user's utterance.\n"
        "2. List as many aspects as exist for topic t in general (its facets, or possible answers), whether or not "
        "the response mentions them.\n"
        "3. For each aspect, give the numbers of the profile statements it is or could be relevant to (empty when "
        "none).\n"
        "4. For each aspect the response actually covers, copy the part of the response that talks about it into "
        "`content`; leave `content` empty for aspects the response does not cover.",
    )


@register_judge
class AEPDJudge(Judge):
    name = "aepd"
    config_model = AEPDJudgeConfig
    roles = (ROLE,)
    scale = "0-1"
    config: AEPDJudgeConfig

    def requirements(self) -> list[Requirement]:
        return [has("a personal profile (PTKB statements, preferences or a persona)", profile_statements)]

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        statements = profile_statements(case)
        gated = await ask_again_once(
            env.gateway,
            self.role,
            annotation_messages(case, response, statements),
            annotation_model(len(statements), self.config.min_aspects, self.config.max_aspects),
            lambda a: annotation_problems(a, response.text, self.config.min_aspects),
            self.step,
        )
        annotation = gated.output
        unscorable = structural_problems(annotation, self.config.min_aspects)
        if unscorable:
            raise gated.failure("the aspect annotation", unscorable)
        rows: list[dict[str, Any]] = []
        merged: list[str] = []
        removed: list[str] = []
        seen: set[str] = set()
        for a in annotation.aspects:
            name = " ".join(a.aspect.split())
            if _aspect_key(name) in seen:  # the metric needs unique aspects; a repeated one is dropped
                merged.append(name)
                continue
            seen.add(_aspect_key(name))
            ids = [statements[int(n) - 1][0] for n in dict.fromkeys(a.profile_statements)]
            quoted_span = a.content.strip()
            content = located(quoted_span, response.text) if quoted_span else None
            if quoted_span and content is None:
                removed.append(quoted_span)
            rows.append(
                {
                    "aspect": name,
                    "personalized": bool(ids),
                    "profile_ids": ids,
                    "content": content or "",
                    **({"removed_span": quoted_span} if quoted_span and content is None else {}),
                }
            )
        try:
            scores = aepd_scores(
                AEPDInput.model_validate(
                    {
                        "aspects": [
                            {"aspect": r["aspect"], "personalized": r["personalized"], "content": r["content"] or None}
                            for r in rows
                        ]
                    }
                )
            )
        except ValueError as exc:
            raise JudgeFailed(f"aspect annotation cannot be scored: {exc}") from None
        degraded = list(gated.degraded)
        if removed:
            degraded.append(
                degradation(
                    "spans_removed",
                    self.step,
                    f"{len(removed)} of "
                    f"{sum(bool(a.content.strip()) for a in annotation.aspects)} quoted spans not "
                    f"in the response, e.g. {quoted(removed[0])}",
                    count=len(removed),
                )
            )
        return self.result(
            scores.p_score,
            criteria={
                "p_score": scores.p_score,
                "d_score": scores.d_score,
                "npp": scores.npp,
                "npcl": scores.npcl,
                "ar": scores.ar,
                "clu": scores.clu,
            },
            details={
                "topic": annotation.topic,
                "aspects": rows,
                "repeated_aspects": merged,
                "spans_removed": len(removed),
                **scores.model_dump(),
            },
            flags=["spans_removed"] if removed else [],
            degraded=degraded,
        )
