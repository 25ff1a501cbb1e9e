"""The judge protocol's contract (agents/judges/base.py), clause by clause.

- scores inside the declared scale: every judge declares its `scale` as `low-high` (`0-1`,
  `1-5`, `0-100`; both bounds finite); each judgment's score — and each repeat's — is a finite
  number within it (a bool, numpy's included, is no score), or None (undefined by the judge's
  protocol). Every run holds each judgment to it (`held_to_contract`, where the run's judges are
  called: the judge graph, a rescore, the comparisons): a score outside the scale, or not finite
  (a repeat's included: its repeats are then not averaged), fails the judgment with the value and
  the scale, recorded as `judge_off_scale`. A judge whose scale does not parse, or whose bounds
  are not finite, is refused before any episode (`Judge.scale_problem`, in `check_judge_fit`);
- junk output gated and recorded: model output that cannot be used is never a clean score
  (`atelier check judge` only: it feeds the judge malformed and degenerate output);
- failures returned as failed judgments: a judgment that cannot be made is a failed JudgeResult
  with its reason (a judge raises JudgeFailed, or lets a ModelCallError through, and `Judge.judge`
  returns the failure), never an exception out of the judge. Every run holds each judgment to it
  (`held_to_contract`): a judge that raises anything else (a bug: a RuntimeError, a TypeError, a
  JudgeResult its own validation refuses) fails that judgment alone, naming the judge and the
  exception, recorded as `judge_raised`; the episode keeps its response and the other judges'
  judgments. Let through: cancellation (not an Exception), and an `EpisodeFailure`, which fails the
  episode by design wherever it is raised — a local model server that died (`LocalServerDied`:
  nothing falls back past it) and a request a replayed web never recorded (`ReplayMiss`: a replay
  never judges on less than was recorded).

`atelier check judge` (runs/studies/conformance/judge.py) applies the same functions to its
synthetic judgments.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any

from atelier.agents.judges.base import Judge, JudgeFailed, JudgeResult, is_bool, parse_scale
from atelier.agents.models.answer_contract import recording_answers
from atelier.agents.models.gateway import ModelCallError
from atelier.benchmarks.common.contract import ContractClause
from atelier.benchmarks.common.errors import EpisodeFailure

PROTOCOL = "judge"
SCALE = ContractClause(PROTOCOL, "scores inside the declared scale", "judge_off_scale")
JUNK = ContractClause(PROTOCOL, "junk output gated and recorded")
RETURNED = ContractClause(PROTOCOL, "failures returned as failed judgments", "judge_raised")


def _shown(value: Any) -> str:
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


def _scale_text(scale: str, limit: int = 40) -> str:
    """`scale` as a message names it, cut (its length said) when it is long: an edited file's."""
    return scale if len(scale) <= limit else f"{scale[:limit]}… ({len(scale)} characters)"


def score_problems(result: JudgeResult, scale: str) -> list[str]:
    """What in `result` lies outside `scale` or is not a finite number: its score, each repeat's
    score (`details.repeat_scores`, which must be a list of them; its criteria are on scales of their
    own, undeclared: meta-eval reads a criterion that is not a finite number as unscored). A scale
    that is not `low-high` with finite bounds (a results file's, edited) holds no score."""
    if result.failed:
        return []
    bounds = parse_scale(scale)
    problems = []
    scores = [("score", result.score)]
    repeats = result.details.get("repeat_scores")
    if repeats is not None and not isinstance(repeats, (list, tuple)):  # a judge's bug, or an edited file
        problems.append(f"repeat_scores {_shown(repeats)} is not a list of scores")
        repeats = None
    scores += [(f"repeat {i} score", s) for i, s in enumerate(repeats or [], 1)]
    if bounds is None and any(score is not None for _, score in scores):  # an edited file: 0-(400 nines) is inf
        problems.append(f"scale {_scale_text(scale)} is not 'low-high' with finite bounds: no score lies within it")
    for what, score in scores:
        if score is None:
            continue
        if is_bool(score):  # `true`, numpy's bool_: 1.0 to pydantic, no score
            problems.append(f"{what} {str(score).lower()} is a bool, not a score")
        elif not isinstance(score, (int, float)) or not math.isfinite(score):
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
    broken = SCALE.broken(f"judge {result.judge!r} (scale {_scale_text(scale)}): {'; '.join(problems)}", step)
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


async def returned(judge: Judge, judgment: Awaitable[JudgeResult]) -> JudgeResult:
    """`judgment` (a call of `judge.judge` or `judge_pair`) as a JudgeResult, whatever it raised:
    the protocol's own failures (JudgeFailed, a ModelCallError — a refused budget's "budget reached"
    included) as the failed judgment `Judge.judge` makes of them, and anything else as a failed
    judgment naming the judge and the exception, with a `judge_raised` degradation at the judge's
    step. Cancellation and an `EpisodeFailure` go through."""
    try:
        return await judgment
    except EpisodeFailure:  # fails the episode by design, wherever it is raised
        raise
    except (JudgeFailed, ModelCallError) as exc:
        return judge.failure(str(exc))
    except Exception as exc:  # a judge may raise anything (a bug): recorded, failing its judgment alone
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the run is stopping under it: not the judge's failure
            raise
        said = " ".join(str(exc).split())  # one line (a ValidationError's spans several)
        what = f"judge {judge.key!r} raised {type(exc).__name__}" + (f": {said}" if said else "")
        return JudgeResult(
            judge=judge.key,
            scale=judge.scale,
            error=f"{RETURNED.label} broken: {what}",  # whole: the degradation's detail is cut to a line's length
            details={"raised": type(exc).__name__},
            degraded=[RETURNED.broken(what, judge.step)],
        )


async def held_to_contract(judge: Judge, judgment: Awaitable[JudgeResult]) -> JudgeResult:
    """`judgment` (a call of `judge.judge` or `judge_pair`), held to the judge's contract: a
    judgment, never an exception out of the judge (`returned`), its score on the declared scale
    (`held_to_scale`), and what its model calls' answers broke of the provider contract (a cut or
    filtered answer: agents/models/answer_contract.py) recorded with it."""
    with recording_answers() as answers:
        result = await returned(judge, judgment)
    result = held_to_scale(result, judge.scale, judge.step)
    return result.model_copy(update={"degraded": [*result.degraded, *answers]}) if answers else result
