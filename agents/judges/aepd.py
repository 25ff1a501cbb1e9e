"""AEPD judge (Hiramatsu et al., 2025): aspect-based personalization and diversification of a turn.

As in the authors' pilot (their prompt, risa-hira/AEPD `prompts.md`), the model annotates the turn:
the topic t of the user's utterance; as many possible aspects of t as it can think of (A'_all); for each,
the numbers of the user's profile statements that make it personal (A'_per; empty when none); and
for the aspects the response covers (A_all), the response text about it. Word counts (whitespace
split, as the authors' code) and every score (NPP, NPCL, P_score, AR, CLU, D_score) are computed by
`benchmarks.metrics.aepd`. The headline is P_score; D_score and the rest are in `criteria`.

The profile is the user's PTKB (TREC iKAT, as in the paper); for cases without one, their stated
preferences, else the facets of their structured persona. Model role: `aepd_judge`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from agents.judges.base import Judge, JudgeConfig, JudgeEnv, JudgeFailed, JudgeResult, Requirement, has, register_judge
from agents.judges.material import numbered, response_section
from agents.prompts import Section, build_messages, conversation_section
from agents.response import SystemResponse
from benchmarks.case import Case
from benchmarks.metrics.aepd import AEPDInput, aepd_scores

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
    max_aspects: int = Field(default=25, ge=2, le=60, description="At most this many possible aspects per topic.")


def annotation_model(statements: int, max_aspects: int) -> type[BaseModel]:
    numbers = tuple(str(i) for i in range(1, statements + 1))
    aspect = create_model(
        "AspectAnnotation",
        aspect=(str, Field(min_length=1, description="A short name for one facet or possible answer of the topic.")),
        profile_statements=(list[Literal[numbers]], Field(  # type: ignore[valid-type]
            description="Numbers of the profile statements this aspect is relevant to; empty when none.")),
        content=(str, Field(description="The response's text about this aspect, copied from it; empty when the "
                                        "response does not cover the aspect.")),
    )
    return create_model(
        "TurnAnnotation",
        topic=(str, Field(min_length=1, description="The topic t of the user's utterance.")),
        aspects=(list[aspect], Field(min_length=1, max_length=max_aspects, description="Every possible aspect of t.")),
    )


def annotation_messages(case: Case, response: SystemResponse, statements: list[tuple[str, str]]) -> list[dict[str, str]]:
    sections = [Section("The user's personal profile", numbered([text for _, text in statements]), untrusted=True)]
    if case.query.previous_turns:
        sections.append(conversation_section(case.query.previous_turns))
    sections += [Section("The user's utterance", case.query.text, untrusted=True),
                 response_section(response, "The system's response")]
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

    async def judge_once(self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None) -> JudgeResult:
        statements = profile_statements(case)
        annotation = await env.gateway.structured(
            self.role, annotation_messages(case, response, statements),
            annotation_model(len(statements), self.config.max_aspects))
        rows: list[dict[str, Any]] = []
        merged: list[str] = []
        seen: set[str] = set()
        for a in annotation.aspects:
            name = " ".join(a.aspect.split())
            if name.lower() in seen:  # the metric needs unique aspects; a repeated one is dropped
                merged.append(name)
                continue
            seen.add(name.lower())
            ids = [statements[int(n) - 1][0] for n in dict.fromkeys(a.profile_statements)]
            rows.append({"aspect": name, "personalized": bool(ids), "profile_ids": ids,
                         "content": a.content.strip(), "in_response": a.content.strip() in response.text})
        try:
            scores = aepd_scores(AEPDInput.model_validate(
                {"aspects": [{"aspect": r["aspect"], "personalized": r["personalized"], "content": r["content"] or None}
                             for r in rows]}))
        except ValueError as exc:
            raise JudgeFailed(f"aspect annotation cannot be scored: {exc}") from None
        covered = [r for r in rows if r["content"]]
        return self.result(
            scores.p_score,
            criteria={"p_score": scores.p_score, "d_score": scores.d_score, "npp": scores.npp, "npcl": scores.npcl,
                      "ar": scores.ar, "clu": scores.clu},
            details={"topic": annotation.topic, "aspects": rows, "repeated_aspects": merged,
                     "spans_not_in_response": sum(not r["in_response"] for r in covered), **scores.model_dump()},
        )
