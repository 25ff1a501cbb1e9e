"""The judge protocol's contract (agents/judges/base.py), clause by clause.

- scores inside the declared scale: every judge declares its `scale` as `low-high` (`0-1`,
  `1-5`, `0-100`); each judgment's score — and each repeat's — is a finite number within it, or
  None (undefined by the judge's protocol). Every run holds each
  judgment to it (`held_to_contract`, where the run's judges are called: the judge graph, a
  rescore, the comparisons): a score outside the scale, or not finite, fails the judgment with
  the value and the scale, recorded as `judge_off_scale`. A judge whose scale does not parse is
  refused before any episode (`Judge.scale_problem`, in `check_judge_fit`);
- junk output gated and recorded: model output that cannot be used is never a clean score
  (`atelier check judge` only: it feeds the judge malformed and degenerate output).

`atelier check judge` (runs/studies/conformance/judge.py) applies the same functions to its
synthetic judgments.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any

from atelier.agents.judges.base import Judge, JudgeResult, parse_scale
from atelier.agents.models.answer_contract import recording_answers
from atelier.benchmarks.common.contract import ContractClause

PROTOCOL = "judge"
SCALE = ContractClause(PROTOCOL, "scores inside the declared scale", "judge_off_scale")
JUNK = ContractClause(PROTOCOL, "junk output gated and recorded")


def _shown(value: Any) -> str:
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


def score_problems(result: JudgeResult, scale: str) -> list[str]:
    """What in `result` lies outside `scale` or is not a finite number: its score, each repeat's
    score (its criteria are on scales of their own, undeclared: meta-eval reads a criterion that is
    not a finite number as unscored)."""
    if result.failed:
        return []
    bounds = parse_scale(scale)
    problems = []
    scores = [("score", result.score)]
    scores += [(f"repeat {i} score", s) for i, s in enumerate(result.details.get("repeat_scores") or [], 1)]
    for what, score in scores:
        if score is None:
            continue
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            problems.append(f"{what} {_shown(score)} is not a finite number")
        elif bounds is not None and not bounds[0] <= score <= bounds[1]:
            problems.append(f"{what} {_shown(score)} is outside the declared scale {scale}")
    return problems


def held_to_scale(result: JudgeResult, scale: str, step: str) -> JudgeResult:
    """`result`, or — a score outside `scale` or not finite — a failed judgment naming the value and
    the scale, with a `judge_off_scale` degradation recorded at `step`."""
    problems = score_problems(result, scale)
    if not problems:
        return result
    broken = SCALE.broken(f"judge {result.judge!r} (scale {scale}): {'; '.join(problems)}", step)
    return JudgeResult(
        judge=result.judge,
        scale=scale,
        error=broken.detail,
        details={
            "rejected": {"score": _shown(result.score), "criteria": {k: _shown(v) for k, v in result.criteria.items()}}
        },
        degraded=[*result.degraded, broken],
    )


def as_recorded(result: JudgeResult) -> JudgeResult:
    """A judgment read back from a results file, held to the scale it records (a file written before
    runs held judges to their scale, or edited, may hold a score off it, or NaN): never a crash."""
    return held_to_scale(result, result.scale, f"judge:{result.judge}")


async def held_to_contract(judge: Judge, judgment: Awaitable[JudgeResult]) -> JudgeResult:
    """`judgment` (a call of `judge.judge` or `judge_pair`), held to the judge's contract: its score
    on the declared scale (`held_to_scale`), and what its model calls' answers broke of the provider
    contract (a cut or filtered answer: agents/models/answer_contract.py) recorded with it."""
    with recording_answers() as answers:
        result = await judgment
    result = held_to_scale(result, judge.scale, judge.step)
    return result.model_copy(update={"degraded": [*result.degraded, *answers]}) if answers else result
