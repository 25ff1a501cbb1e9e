"""`atelier meta-eval`: how well a judge agrees with labels — human labels, or another judge's run.

The judge under test is read from a run folder (its per-criterion scores in results.jsonl); the
labels from a JSON Lines file (one `{"case_id", "system", "criterion", "score", "feedback"?}` per
line) or from another run folder and judge. Per criterion, and pooled over all criteria: PCA and
MARD (PDR-Bench Appendix C; PCA over every two responses to the same case), Pearson and Spearman
(BESPOKE's score alignment). With `feedback`, BESPOKE's feedback accuracy: a meta-judge model decides
whether the judge's feedback on a criterion conveys what the label's feedback does (Table 20).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from agents.gateway import Gateway
from agents.judges.bespoke import FeedbackVerdict, feedback_messages, rubric_text
from benchmarks.case import Case
from benchmarks.errors import ConfigError, DataError
from benchmarks.metrics.agreement import LabelledScore, criterion_agreement, feedback_accuracy
from graphs.judge import ARTIFACTS_DIR
from runs.results import ResultRecord, ResultsFile

HEADLINE = "score"  # the judge's headline score, compared like a criterion


class Label(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str = Field(min_length=1)
    system: str = Field(min_length=1)
    criterion: str = Field(min_length=1, description=f"A criterion of the judge's `criteria`, or {HEADLINE!r}.")
    score: FiniteFloat
    feedback: str | None = None


def read_labels(path: Path) -> list[Label]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"cannot read the labels: {exc.strerror}", file=path) from None
    labels = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            labels.append(Label.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg})", file=path, line=number) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise DataError(first["msg"], file=path, line=number, field=".".join(map(str, first["loc"]))) from None
    if not labels:
        raise DataError("no labels in the file", file=path)
    return labels


def judge_records(run_dir: Path, judge: str) -> dict[str, ResultRecord]:
    path = run_dir / "results.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run folder with results (no results.jsonl)")
    records = ResultsFile(path).load()
    judged = {key: r for key, r in records.items() if any(j.judge == judge and not j.failed for j in r.judgments)}
    if not judged:
        keys = sorted({j.judge for r in records.values() for j in r.judgments})
        raise ConfigError(f"no judgment by {judge!r} in {run_dir} (judges there: {', '.join(keys) or 'none'})")
    return judged


def labels_from_run(run_dir: Path, judge: str) -> list[Label]:
    """A run's judgments by `judge` as labels: each criterion, the headline as `score`, and feedback."""
    labels = []
    for record in judge_records(run_dir, judge).values():
        result = next(j for j in record.judgments if j.judge == judge and not j.failed)
        feedback = result.details.get("feedback") or {}
        scores = {**result.criteria, HEADLINE: result.score}
        labels += [Label(case_id=record.case_id, system=record.system, criterion=name, score=value,
                         feedback=feedback.get(name)) for name, value in scores.items() if value is not None]
    return labels


def agreement(judged: list[Label], labels: list[Label], criteria: list[str] | None = None) -> dict[str, Any]:
    """Per criterion and pooled: PCA, MARD, Pearson, Spearman over the responses both scored."""
    truth = {(lb.case_id, lb.system, lb.criterion): lb.score for lb in labels}
    names = criteria or sorted({lb.criterion for lb in judged} & {lb.criterion for lb in labels})
    if not names:
        raise ConfigError("the judge's criteria and the labels' criteria have none in common "
                          f"(judge: {sorted({lb.criterion for lb in judged})}; labels: {sorted({lb.criterion for lb in labels})})")
    per: dict[str, Any] = {}
    pooled: list[LabelledScore] = []
    for name in names:
        items = [LabelledScore(case_id=j.case_id, system=j.system, model=j.score, human=truth[(j.case_id, j.system, name)])
                 for j in judged if j.criterion == name and (j.case_id, j.system, name) in truth]
        per[name] = criterion_agreement(items).model_dump() if items else {"n": 0}
        # pooled PCA compares responses within one (case, criterion), as Appendix C's query-criterion pairs
        pooled += [i.model_copy(update={"case_id": f"{i.case_id}::{name}"}) for i in items]
    return {"criteria": per, "pooled": criterion_agreement(pooled).model_dump() if pooled else {"n": 0}}


async def feedback_agreement(judged: list[Label], labels: list[Label], records: dict[str, ResultRecord],
                             cases: dict[str, Case], gateway: Gateway, run_dir: Path, judge: str,
                             concurrency: int = 8) -> dict[str, Any]:
    """BESPOKE's feedback accuracy per criterion: the meta-judge compares the two feedbacks in the
    context of the query, gold need, rubric and response (Table 20)."""
    truth = {(lb.case_id, lb.system, lb.criterion): lb.feedback for lb in labels if lb.feedback}
    by_case_system = {(r.case_id, r.system): r for r in records.values()}
    limit = asyncio.Semaphore(concurrency)

    async def one(item: Label) -> tuple[str, bool]:
        record = by_case_system[(item.case_id, item.system)]
        result = next(j for j in record.judgments if j.judge == judge and not j.failed)
        rubric = _rubric_text(run_dir, result.details.get("rubric_key"))
        messages = feedback_messages(item.criterion, cases[item.case_id], record.response.text, rubric,
                                     truth[(item.case_id, item.system, item.criterion)], item.feedback or "")
        async with limit:
            verdict = await gateway.structured("meta_judge", messages, FeedbackVerdict)
        return item.criterion, verdict.decision == "O"

    compared = [j for j in judged if j.feedback and (j.case_id, j.system, j.criterion) in truth and j.case_id in cases]
    if not compared:
        raise ConfigError("no response has feedback from both the judge and the labels on the same criterion")
    outcomes = await asyncio.gather(*(one(item) for item in compared))
    names = sorted({name for name, _ in outcomes})
    return {name: {"n": sum(1 for n, _ in outcomes if n == name),
                   "accuracy": feedback_accuracy([ok for n, ok in outcomes if n == name])} for name in names} | {
        "all": {"n": len(outcomes), "accuracy": feedback_accuracy([ok for _, ok in outcomes])}}


def _rubric_text(run_dir: Path, key: str | None) -> str:
    if not key:
        return ""
    path = run_dir / ARTIFACTS_DIR / "bespoke_rubric" / f"{key}.json"
    if not path.is_file():
        return ""
    return rubric_text(json.loads(path.read_text(encoding="utf-8"))["artifact"])
