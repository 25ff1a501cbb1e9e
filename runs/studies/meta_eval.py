"""`atelier meta-eval`: how well a judge agrees with labels — human labels, or another judge's run.

The judge under test is read from a run folder (its scores in results.jsonl); the labels from a
labelling sheet (CSV, as `write_sheet` makes it and a spreadsheet saves it back), a JSON Lines file
(one `{"case_id", "system", "criterion", "score", "feedback"?}` per line), or another run folder
and judge.

Agreement is computed per criterion, each criterion on its own scores only: criteria live on
different scales (BESPOKE's 1-5 ratings, a 0-1 recall, a 0-100 headline), so one correlation pooled
over them would measure the gap between scales, not agreement. Per criterion: PCA with a seeded
bootstrap CI and MARD (PDR-Bench Appendix C; PCA over every two responses to the same case),
Pearson and Spearman (BESPOKE's score alignment). The average is the mean of the per-criterion
figures (BESPOKE Table 3's "Avg."). A PQR judgment also carries its sub-criteria (generated per
query): those are compared per (query, sub-criterion), as Appendix C counts them — per dimension,
and over every sub-criterion, all on PQR's one 0-10 scale (PDR-Bench Table 4's PCA and MARD).

Every label is accounted for: matched, not selected (`--criterion`), or unmatched with its reason
(unknown case, system or criterion, no judgment or score by the judge, a sub-criterion worded
differently); when none matches there is nothing to measure and the command fails. With
`feedback`, BESPOKE's feedback accuracy: a meta-judge model decides whether the judge's feedback on
a criterion conveys what the label's feedback does (Table 20).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, PrivateAttr, ValidationError

from atelier.agents.judges.bespoke import BASE_SCALE, CRITERION_TITLES, FeedbackVerdict, feedback_messages, rubric_text
from atelier.agents.judges.material import persona_text
from atelier.agents.judges.pqr import DIMENSIONS
from atelier.agents.models.gateway import Gateway
from atelier.benchmarks.case import Case
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.metrics.agreement import (
    CriterionAgreement,
    LabelledScore,
    average_agreement,
    criterion_agreement,
    feedback_accuracy,
)
from atelier.benchmarks.metrics.statistics import DEFAULT_RESAMPLES
from atelier.graphs.judge import ARTIFACTS_DIR
from atelier.runs.folder.results import ResultRecord, ResultsFile

HEADLINE = "score"  # the judge's headline score, compared like a criterion
SUB_CRITERION_SCALE = "0-10"  # PQR's stage-3 scores


# --------------------------------------------------------------------------- labels


class Label(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str = Field(min_length=1)
    system: str = Field(min_length=1)
    criterion: str = Field(
        min_length=1,
        description=f"A criterion of the judge's `criteria`, a PQR sub-criterion id (e.g. GOAL-1), or {HEADLINE!r}.",
    )
    score: FiniteFloat
    feedback: str | None = None
    criterion_text: str | None = Field(
        default=None,
        description="A PQR sub-criterion's wording; when given it must be the judge's for that case "
        "(sub-criterion ids repeat across queries and criteria generations, their wording does not).",
    )
    _line: int | None = PrivateAttr(default=None)  # where it was read, for error messages and the unmatched list

    def at(self, line: int) -> Label:
        self._line = line
        return self


class LabelFile(BaseModel):
    """What a labels file held: its labels, and the rows of a sheet nobody filled in."""

    path: str
    format: Literal["csv", "jsonl", "run", "page"]
    labels: list[Label]
    unlabelled_rows: int = 0


def read_labels(path: Path) -> LabelFile:
    """A filled-in sheet (CSV) or JSON Lines labels, chosen by the file's suffix (else by its first
    character: `{` is JSON Lines)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read the labels: {exc.strerror}", file=path) from None
    try:
        text = raw.decode("utf-8-sig")  # a spreadsheet's "CSV UTF-8" starts with a byte-order mark
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f'not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the sheet as "CSV UTF-8"', file=path, line=line
        ) from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json") or (suffix not in (".csv", ".tsv") and text.lstrip().startswith("{")):
        found = LabelFile(path=str(path), format="jsonl", labels=_jsonl_labels(text, path))
    else:
        labels, unlabelled = _sheet_labels(text, path)
        found = LabelFile(path=str(path), format="csv", labels=labels, unlabelled_rows=unlabelled)
    if not found.labels:
        raise DataError(
            "no labels in the file"
            + (f" ({found.unlabelled_rows} rows have an empty label)" if found.unlabelled_rows else ""),
            file=path,
        )
    _refuse_duplicates(found.labels, path)
    return found


def labels_from_page(run_dir: Path, judge: str, labeller: str) -> LabelFile:
    """One labeller's labels from the labelling page (`atelier label`): the last one given per
    (case, system, criterion), each on the judge's criterion scale."""
    from atelier.runs.studies.label_store import labellers, labels_path, latest_labels

    path = labels_path(run_dir, judge, labeller)
    latest = latest_labels(path)
    if not latest:
        known = labellers(run_dir, judge)
        raise ConfigError(
            f"no labels by {labeller!r} for judge {judge!r} in {run_dir} ({path} is missing or empty); "
            + (
                f"labellers there: {', '.join(known)}"
                if known
                else f"label them with `atelier label {run_dir} --judge {judge}`"
            )
        )
    labels = []
    for data in latest.values():
        fields = {k: data.get(k) for k in ("case_id", "system", "criterion", "score", "feedback", "criterion_text")}
        try:
            labels.append(Label.model_validate(fields).at(data["_line"]))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise DataError(
                first["msg"], file=path, line=data["_line"], field=".".join(map(str, first["loc"]))
            ) from None
    return LabelFile(path=str(path), format="page", labels=labels)


def _jsonl_labels(text: str, path: Path) -> list[Label]:
    labels = []
    # split on "\n" only: str.splitlines() also breaks at U+2028, U+0085 ... which JSON strings may hold raw
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            labels.append(Label.model_validate(json.loads(line)).at(number))
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg})", file=path, line=number) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise DataError(first["msg"], file=path, line=number, field=".".join(map(str, first["loc"]))) from None
    return labels


# The sheet's columns, in the order a person reads them: what to label, the label, then the material.
SHEET_COLUMNS = (
    "case_id",
    "system",
    "criterion",
    "scale",
    "label",
    "feedback",
    "description",
    "criterion_text",
    "query",
    "persona",
    "response",
)
_REQUIRED = ("case_id", "system", "criterion", "label")
_SCALE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*$")
# Spreadsheets run a cell starting with one of these as a formula; the sheet prefixes such text with "'".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _sheet_labels(text: str, path: Path) -> tuple[list[Label], int]:
    """Labels from a sheet as a spreadsheet saves it: any of , ; or tab as delimiter, columns in any
    order and any case, extra columns ignored, blank rows skipped, a decimal comma accepted."""
    header_line = next((line for line in text.split("\n") if line.strip()), "")
    delimiter = max(",;\t", key=header_line.count)  # the header's own separator (a locale's Excel writes ;)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    labels: list[Label] = []
    unlabelled = 0
    row_start = 1
    for row in reader:
        start, row_start = row_start, reader.line_num + 1  # a quoted cell may span lines: report where the row starts
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            missing = [c for c in _REQUIRED if c not in header and not (c == "label" and "score" in header)]
            if missing:
                raise DataError(
                    f"the sheet's header lacks column(s) {', '.join(map(repr, missing))} "
                    f"(it has: {', '.join(repr(c) for c in header if c)})",
                    file=path,
                    line=start,
                )
            continue
        cells = {name: (row[i] if i < len(row) else "") for i, name in enumerate(header) if name}
        value = (cells["label"] if "label" in header else cells.get("score", "")).strip()
        column = "label" if "label" in header else "score"
        if not value:
            unlabelled += 1
            continue
        for name in ("case_id", "system", "criterion"):
            if not cells[name].strip():
                raise DataError(f"column '{name}' is empty", file=path, line=start)
        score = _number(value, path, start, column)
        scale = _SCALE.match(cells.get("scale", ""))
        if scale and not float(scale[1]) <= score <= float(scale[2]):
            raise DataError(
                f"column '{column}': {value} is outside the criterion's scale {scale[0].strip()}", file=path, line=start
            )
        criterion_text = _unescaped(cells.get("criterion_text", "")).strip()
        labels.append(
            Label(
                case_id=cells["case_id"].strip(),
                system=cells["system"].strip(),
                criterion=cells["criterion"].strip(),
                score=score,
                feedback=_unescaped(cells.get("feedback", "")).strip() or None,
                criterion_text=criterion_text or None,
            ).at(start)
        )
    if header is None:
        raise DataError("the sheet is empty (no header row)", file=path)
    return labels, unlabelled


def _number(value: str, path: Path, line: int, column: str) -> float:
    text = value.strip()
    if "," in text and "." not in text:  # a decimal comma (a spreadsheet in a comma-decimal locale)
        text = text.replace(",", ".")
    try:
        number = float(text)
    except ValueError:
        raise DataError(f"column '{column}': {value!r} is not a number", file=path, line=line) from None
    if not math.isfinite(number):
        raise DataError(f"column '{column}': {value!r} is not a finite number", file=path, line=line)
    return number


def _refuse_duplicates(labels: list[Label], path: Path) -> None:
    seen: dict[tuple[str, str, str], Label] = {}
    for label in labels:
        key = (label.case_id, label.system, label.criterion)
        if key in seen:
            raise DataError(
                f"a second label for case {key[0]!r}, system {key[1]!r}, criterion {key[2]!r} "
                f"(the first is on line {seen[key]._line})",
                file=path,
                line=label._line,
            )
        seen[key] = label


def _escaped(text: str) -> str:
    return "'" + text if text.startswith(_FORMULA_START) else text


def _unescaped(text: str) -> str:
    return text[1:] if text.startswith("'") and text[1:].startswith(_FORMULA_START) else text


def _same_wording(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


# --------------------------------------------------------------------------- the judge's scores


class JudgedScore(BaseModel):
    """One score of the judge under test on one response."""

    case_id: str
    system: str
    criterion: str
    score: float
    feedback: str | None = None
    dimension: str | None = Field(default=None, description="A PQR sub-criterion's dimension code (GOAL, DEIN, ...).")
    text: str | None = Field(default=None, description="A PQR sub-criterion's wording.")


@dataclass
class RunScores:
    """A judge's scores in a run, and what a label is matched against."""

    run: str
    judge: str
    records: dict[tuple[str, str], ResultRecord]  # (case, system) -> the run's record
    scores: dict[tuple[str, str, str], JudgedScore]  # (case, system, criterion) -> the judge's score
    unscored: set[tuple[str, str, str]]  # criteria the judge left without a score on a response

    def judged(self, case_id: str, system: str) -> bool:
        record = self.records.get((case_id, system))
        return record is not None and _judgment(record, self.judge) is not None


def _judgment(record: ResultRecord, judge: str):
    return next((j for j in record.judgments if j.judge == judge and not j.failed), None)


def sub_criteria(details: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A PQR judgment's sub-criteria as (dimension code, row with id, criterion, score), in order."""
    found = []
    for axis in ("P", "Q"):
        block = details.get(axis)
        if not isinstance(block, dict) or not isinstance(block.get("dimensions"), dict):
            continue
        for code, dimension in block["dimensions"].items():
            found += [(code, row) for row in dimension.get("criteria", []) if isinstance(row, dict) and "id" in row]
    return found


def judge_records(run_dir: Path, judge: str) -> dict[str, ResultRecord]:
    """The run's records (every one: a label on a failed judgment is told apart from an unknown
    case), once it is clear that `judge` scored at least one."""
    path = run_dir / "results.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run folder with results (no results.jsonl)")
    # a system's own episodes: its counterfactual controls (`[run] controls`) are no answer a person labels
    records = {key: r for key, r in ResultsFile(path).load().items() if r.control is None}
    judged = {key: r for key, r in records.items() if _judgment(r, judge) is not None}
    if not judged:
        keys = sorted({j.judge for r in records.values() for j in r.judgments})
        raise ConfigError(f"no judgment by {judge!r} in {run_dir} (judges there: {', '.join(keys) or 'none'})")
    return records


def run_scores(run_dir: Path, judge: str) -> RunScores:
    """Every score of `judge` in the run: its criteria, its headline as `score`, PQR's sub-criteria."""
    records = judge_records(run_dir, judge)
    scores: dict[tuple[str, str, str], JudgedScore] = {}
    unscored: set[tuple[str, str, str]] = set()

    def add(record: ResultRecord, criterion: str, value: float | None, **about: Any) -> None:
        key = (record.case_id, record.system, criterion)
        if value is None or not math.isfinite(value):  # a NaN read back from a results file scores nothing
            unscored.add(key)
        else:
            scores[key] = JudgedScore(
                case_id=record.case_id, system=record.system, criterion=criterion, score=value, **about
            )

    for record in records.values():
        result = _judgment(record, judge)
        if result is None:
            continue
        feedback = result.details.get("feedback") or {}
        for name, value in {**result.criteria, HEADLINE: result.score}.items():
            add(record, name, value, feedback=feedback.get(name))
        for code, row in sub_criteria(result.details):
            add(record, row["id"], row.get("score"), dimension=code, text=row.get("criterion"))
    return RunScores(
        run=str(run_dir),
        judge=judge,
        records={(r.case_id, r.system): r for r in records.values()},
        scores=scores,
        unscored=unscored,
    )


def labels_from_run(run_dir: Path, judge: str) -> LabelFile:
    """A run's scores by `judge` as labels: each criterion, the headline as `score`, PQR sub-criteria
    (with their wording), and feedback."""
    found = run_scores(run_dir, judge)
    labels = [
        Label(
            case_id=s.case_id,
            system=s.system,
            criterion=s.criterion,
            score=s.score,
            feedback=s.feedback,
            criterion_text=s.text,
        )
        for s in found.scores.values()
    ]
    return LabelFile(path=str(run_dir), format="run", labels=labels)


# --------------------------------------------------------------------------- matching labels to scores


class UnmatchedLabel(BaseModel):
    line: int | None
    case_id: str
    system: str
    criterion: str
    reason: str


UNMATCHED_REASONS = {
    "unknown_case": "no response to this case in the run",
    "unknown_system": "the case has no response by this system in the run",
    "not_judged": "the judge has no successful judgment of this response",
    "unknown_criterion": "the judge has no such criterion on this response",
    "no_judge_score": "the judge left this criterion unscored on this response",
    "different_wording": "the sub-criterion is worded differently in the run (criteria generated anew)",
}


@dataclass
class Matching:
    matched: list[tuple[JudgedScore, Label]]
    unmatched: list[UnmatchedLabel]
    not_selected: int


def match_labels(scores: RunScores, labels: list[Label], selected: set[str] | None) -> Matching:
    """Pair each label with the judge's score of the same (case, system, criterion); say why a label
    has none. Labels of criteria outside `selected` are counted as not selected."""
    cases = {case for case, _ in scores.records}
    matched, unmatched, not_selected = [], [], 0
    for label in labels:
        if selected is not None and label.criterion not in selected and not _in_dimension(label, scores, selected):
            not_selected += 1
            continue
        key = (label.case_id, label.system, label.criterion)
        judged = scores.scores.get(key)
        if judged is not None and (
            label.criterion_text is None or judged.text is None or _same_wording(label.criterion_text, judged.text)
        ):
            matched.append((judged, label))
            continue
        if judged is not None:
            reason = "different_wording"
        elif label.case_id not in cases:
            reason = "unknown_case"
        elif (label.case_id, label.system) not in scores.records:
            reason = "unknown_system"
        elif not scores.judged(label.case_id, label.system):
            reason = "not_judged"
        elif key in scores.unscored:
            reason = "no_judge_score"
        else:
            reason = "unknown_criterion"
        unmatched.append(
            UnmatchedLabel(
                line=label._line, case_id=label.case_id, system=label.system, criterion=label.criterion, reason=reason
            )
        )
    return Matching(matched=matched, unmatched=unmatched, not_selected=not_selected)


def _in_dimension(label: Label, scores: RunScores, selected: set[str]) -> bool:
    """`--criterion GOAL` also selects GOAL's sub-criteria."""
    judged = scores.scores.get((label.case_id, label.system, label.criterion))
    return judged is not None and judged.dimension in selected


# --------------------------------------------------------------------------- agreement


class Bootstrap(BaseModel):
    confidence: float = Field(default=0.95, gt=0, lt=1)
    n_resamples: int = Field(default=DEFAULT_RESAMPLES, ge=1)
    seed: int = 0


def _agreement(pairs: list[tuple[JudgedScore, Label]], bootstrap: Bootstrap, unit: str = "case") -> CriterionAgreement:
    items = [
        LabelledScore(
            case_id=j.case_id if unit == "case" else f"{j.case_id}::{j.criterion}",
            system=j.system,
            model=j.score,
            human=lb.score,
        )
        for j, lb in pairs
    ]
    return criterion_agreement(items, bootstrap.confidence, bootstrap.n_resamples, bootstrap.seed)


def agreement(
    scores: RunScores, labels: LabelFile, criteria: list[str] | None = None, bootstrap: Bootstrap | None = None
) -> dict[str, Any]:
    """The agreement report: which labels matched, per criterion figures and their average, and for
    PQR sub-criteria the per-(query, sub-criterion) figures by dimension and overall."""
    bootstrap = bootstrap or Bootstrap()
    selected = set(criteria) if criteria else None
    if selected is not None:
        known = {s.criterion for s in scores.scores.values()} | {
            s.dimension for s in scores.scores.values() if s.dimension
        }
        unknown = sorted(selected - known)
        if unknown:
            raise ConfigError(
                f"--criterion {', '.join(unknown)}: judge {scores.judge!r} has no such criterion in "
                f"{scores.run} (its criteria: {', '.join(sorted(_top_level(scores)))})"
            )
    matching = match_labels(scores, labels.labels, selected)
    reasons = Counter(u.reason for u in matching.unmatched)
    if not matching.matched:
        where = "; ".join(f"{UNMATCHED_REASONS[r]}: {n}" for r, n in reasons.most_common())
        selection = f", {matching.not_selected} outside --criterion" if matching.not_selected else ""
        raise ConfigError(
            f"none of the {len(labels.labels)} labels in {labels.path} matches a score of judge "
            f"{scores.judge!r} in {scores.run} ({where or 'no label selected'}{selection})"
        )

    by_criterion: dict[str, list[tuple[JudgedScore, Label]]] = {}
    by_dimension: dict[str, list[tuple[JudgedScore, Label]]] = {}
    for judged, label in matching.matched:
        if judged.dimension is None:
            by_criterion.setdefault(judged.criterion, []).append((judged, label))
        else:
            by_dimension.setdefault(judged.dimension, []).append((judged, label))
    per = {name: _agreement(pairs, bootstrap) for name, pairs in sorted(by_criterion.items())}
    averaged = {name: a for name, a in per.items() if name != HEADLINE}
    report: dict[str, Any] = {
        "labels": {
            "file": labels.path,
            "format": labels.format,
            "read": len(labels.labels),
            "unlabelled_rows": labels.unlabelled_rows,
            "matched": len(matching.matched),
            "not_selected": matching.not_selected,
            "unmatched": len(matching.unmatched),
            "unmatched_by_reason": dict(reasons.most_common()),
        },
        "unmatched": [u.model_dump() for u in matching.unmatched],
        "bootstrap": bootstrap.model_dump(),
        "criteria": {name: a.model_dump() for name, a in per.items()},
        "average": average_agreement(averaged).model_dump() if averaged else None,
    }
    if by_dimension:
        report["sub_criteria"] = _sub_criteria_report(by_dimension, bootstrap)
    return report


def _top_level(scores: RunScores) -> set[str]:
    return {s.criterion for s in scores.scores.values() if s.dimension is None} | {
        s.dimension for s in scores.scores.values() if s.dimension
    }


def _sub_criteria_report(
    by_dimension: dict[str, list[tuple[JudgedScore, Label]]], bootstrap: Bootstrap
) -> dict[str, Any]:
    """PDR-Bench Appendix C's unit: each (query, sub-criterion) compares the responses to the query.
    Per dimension, their average, and over every sub-criterion (one scale, so one figure is sound)."""
    dimensions = {
        code: _agreement(pairs, bootstrap, unit="sub_criterion") for code, pairs in sorted(by_dimension.items())
    }
    every = [pair for pairs in by_dimension.values() for pair in pairs]
    per_query: dict[tuple[str, str], list[tuple[JudgedScore, Label]]] = {}
    for judged, label in every:
        per_query.setdefault((judged.case_id, judged.criterion), []).append((judged, label))
    units = []
    for (case_id, criterion), pairs in sorted(per_query.items()):
        first = pairs[0][0]
        comparisons = [(a, b) for i, a in enumerate(pairs) for b in pairs[i + 1 :]]
        agreeing = sum(
            1 for (ja, la), (jb, lb) in comparisons if _sign(ja.score - jb.score) == _sign(la.score - lb.score)
        )
        units.append(
            {
                "case_id": case_id,
                "sub_criterion": criterion,
                "dimension": first.dimension,
                "criterion_text": first.text,
                "responses": len(pairs),
                "pairs": len(comparisons),
                "agreeing_pairs": agreeing,
                "mard": math.fsum(abs(j.score - lb.score) for j, lb in pairs) / len(pairs),
            }
        )
    return {
        "scale": SUB_CRITERION_SCALE,
        "dimensions": {code: a.model_dump() for code, a in dimensions.items()},
        "dimension_average": average_agreement(dimensions).model_dump(),
        "all": _agreement(every, bootstrap, unit="sub_criterion").model_dump(),
        "per_query": units,
    }


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def report_json(report: dict[str, Any]) -> str:
    """Strict JSON: a NaN or infinity anywhere is a bug, and fails here rather than in a reader."""
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- feedback (BESPOKE Table 20)


async def feedback_agreement(
    scores: RunScores,
    labels: list[Label],
    cases: dict[str, Case],
    gateway: Gateway,
    run_dir: Path,
    concurrency: int = 8,
) -> dict[str, Any]:
    """BESPOKE's feedback accuracy per criterion, and their mean (Table 3's "Avg."): the meta-judge
    compares the two feedbacks in the context of the query, gold need, rubric and response (Table 20)."""
    judge = scores.judge
    limit = asyncio.Semaphore(concurrency)

    async def one(judged: JudgedScore, label: Label) -> tuple[str, bool]:
        record = scores.records[(judged.case_id, judged.system)]
        assert record.response is not None  # judged, so it has the response judged
        result = _judgment(record, judge)
        rubric = _rubric_text(run_dir, result.details.get("rubric_key"))
        messages = feedback_messages(
            judged.criterion,
            cases[judged.case_id],
            record.response.text,
            rubric,
            label.feedback or "",
            judged.feedback or "",
        )
        async with limit:
            verdict = await gateway.structured("meta_judge", messages, FeedbackVerdict)
        return judged.criterion, verdict.decision == "O"

    compared = [
        (scores.scores[key], label)
        for label in labels
        if label.feedback
        and (key := (label.case_id, label.system, label.criterion)) in scores.scores
        and scores.scores[key].feedback
        and label.case_id in cases
    ]
    if not compared:
        raise ConfigError("no response has feedback from both the judge and the labels on the same criterion")
    outcomes = await asyncio.gather(*(one(judged, label) for judged, label in compared))
    names = sorted({name for name, _ in outcomes})
    per = {
        name: {
            "n": sum(1 for n, _ in outcomes if n == name),
            "accuracy": feedback_accuracy([ok for n, ok in outcomes if n == name]),
        }
        for name in names
    }
    return {
        "criteria": per,
        "average": {
            "criteria": names,
            "n": len(outcomes),
            # each name has an outcome, so an accuracy (None is for none)
            "accuracy": math.fsum(cast(float, p["accuracy"]) for p in per.values()) / len(per),
        },
    }


def _rubric_text(run_dir: Path, key: str | None) -> str:
    if not key:
        return ""
    path = run_dir / ARTIFACTS_DIR / "bespoke_rubric" / f"{key}.json"
    if not path.is_file():
        return ""
    return rubric_text(json.loads(path.read_text(encoding="utf-8"))["artifact"])


# --------------------------------------------------------------------------- the labelling sheet


# Excel keeps at most this many characters in a cell and cuts the rest when it opens a CSV.
SPREADSHEET_CELL_LIMIT = 32_767


def _bespoke_guide() -> dict[str, tuple[str, str]]:
    """BESPOKE's criteria with Table 18's base scale, and recall."""
    blocks: dict[str, str] = {}
    title = None
    for line in BASE_SCALE.split("\n"):
        if line.endswith(":") and not line[0].isdigit():
            title = line[:-1].strip().lower()
        elif title:
            blocks[title] = f"{blocks[title]} {line}".strip() if title in blocks else line
    guide = {name: ("1-5", f"{title_}: {blocks[title_.lower()]}") for name, title_ in CRITERION_TITLES.items()}
    guide["recall"] = (
        "0-1",
        "Recall: the share of the gold information claims the response states without "
        "contradicting them (0 none, 1 all).",
    )
    return guide


def _sub_criterion_guide(code: str, text: str) -> str:
    dimension = DIMENSIONS.get(code)
    about = f"{dimension.title} ({code}): {dimension.definition}" if dimension else code
    return (
        f"{about}\nCriterion: {text}\nScore 0-10: 0-2 very poor (almost completely fails), 2-4 poor, "
        "4-6 average, 6-8 good, 8-10 excellent (fully or exceptionally meets it)."
    )


class SheetSummary(BaseModel):
    path: str
    run: str
    judge: str
    rows: int
    responses: int
    criteria: list[str] = Field(description="The criteria of the rows (PQR sub-criteria by dimension, e.g. GOAL-*).")
    cases_without_query: list[str] = Field(
        description="Cases the benchmark no longer holds: their query cell is empty."
    )
    responses_over_cell_limit: int = Field(
        description=f"Responses longer than a spreadsheet cell holds "
        f"({SPREADSHEET_CELL_LIMIT} characters): cut when opened."
    )


def sheet_judge(run_dir: Path, records: dict[str, ResultRecord], judge: str | None) -> str:
    keys = sorted({j.judge for r in records.values() for j in r.judgments if not j.failed})
    if judge is not None:
        if judge not in keys:
            raise ConfigError(f"no judgment by {judge!r} in {run_dir} (judges there: {', '.join(keys) or 'none'})")
        return judge
    if len(keys) != 1:
        raise ConfigError(f"{run_dir} holds judgments by {', '.join(keys) or 'no judge'}: name one with --judge")
    return keys[0]


class SheetItem(BaseModel):
    """One thing to label: a criterion of one response, with what a person needs to judge it."""

    case_id: str
    system: str
    criterion: str
    scale: str = Field(description="`low-high`, or empty when the judge's criterion has no rubric scale.")
    description: str
    criterion_text: str = Field(description="A PQR sub-criterion's wording (empty otherwise).")
    group: str = Field(description="A PQR sub-criterion's dimension code; the criterion otherwise.")
    query: str
    persona: str
    response: str


class SheetItems(BaseModel):
    judge: str
    judge_name: str = Field(description="The judge's registered name (`bespoke`, `pqr`, ...).")
    items: list[SheetItem]
    sub_criteria: bool = Field(description="PQR: the items are sub-criteria, named by dimension in `criteria`.")
    cases_without_query: list[str]


def sheet_items(run_dir: Path, judge: str | None = None, criteria: list[str] | None = None) -> SheetItems:
    """Every (case, system, criterion) the judge scored in the run, what the sheet and the labelling
    page show for each, in (case, system) order. The judge's own scores are not among them."""
    from atelier.runs.studies.rescore import load_run

    _, recipe, records = load_run(run_dir)
    judge = sheet_judge(run_dir, records, judge)
    name = next((j.get("name") for j in recipe.judges if (j.get("label") or j.get("name")) == judge), judge)
    guide = _bespoke_guide() if name == "bespoke" else {}
    judged = sorted(
        (
            r
            for r in records.values()
            if _judgment(r, judge) is not None and r.response is not None and r.control is None
        ),
        key=lambda r: (r.case_id, r.system),
    )
    wanted = {r.case_id for r in judged}
    cases = {c.id: c for c in recipe.cases(limited=False) if c.id in wanted}
    selected = set(criteria) if criteria else None
    items: list[SheetItem] = []
    any_sub = False
    for record in judged:
        result = _judgment(record, judge)
        found = sub_criteria(result.details)
        any_sub = any_sub or bool(found)
        if found:
            rows = [
                (
                    row["id"],
                    SUB_CRITERION_SCALE,
                    _sub_criterion_guide(code, row.get("criterion", "")),
                    row.get("criterion", ""),
                    code,
                )
                for code, row in found
            ]
        elif name == "lampqa_aspects":
            rows = [(key, *_aspect_guide(result.details, key), "", key) for key in result.criteria]
        else:
            rows = [(key, *guide.get(key, ("", "")), "", key) for key in result.criteria]
        rows = [row for row in rows if selected is None or row[0] in selected or row[4] in selected]
        case = cases.get(record.case_id)
        assert record.response is not None  # `judged` keeps the records with a response
        for criterion, scale, description, wording, group in rows:
            items.append(
                SheetItem(
                    case_id=record.case_id,
                    system=record.system,
                    criterion=criterion,
                    scale=scale,
                    description=description,
                    criterion_text=wording,
                    group=group,
                    query=case.query.text if case else "",
                    persona=persona_text(case) if case else "",
                    response=record.response.text,
                )
            )
    if not items:
        raise ConfigError(
            f"judge {judge!r} in {run_dir} scored no response"
            + (f" on {', '.join(sorted(selected))}" if selected else "")
        )
    return SheetItems(
        judge=judge,
        judge_name=str(name),
        items=items,
        sub_criteria=any_sub,
        cases_without_query=sorted(wanted - set(cases)),
    )


def _aspect_guide(details: dict[str, Any], key: str) -> tuple[str, str]:
    """A LaMP-QA rubric aspect: its 0-1 scale (the judge's 0-2 match score halved) and what it asks.
    A judgment repeated (`repeats` > 1) keeps each repeat's details under `repeats`: the aspects are
    the case's rubric, the same in every repeat."""
    index = int(key.rsplit("_", 1)[-1]) - 1 if key.rsplit("_", 1)[-1].isdigit() else -1
    aspects: list[dict[str, Any]] = details.get("aspects") or next(
        (d["aspects"] for d in details.get("repeats") or [] if isinstance(d, dict) and d.get("aspects")), []
    )
    aspect = aspects[index].get("aspect", "") if 0 <= index < len(aspects) else ""
    return (
        "0-1",
        f"Aspect: {aspect}\nDoes the response address it? Not at all, partly or fully: LaMP-QA's match score "
        "0, 1 or 2 (the labelling page's scale), which the judge and this sheet report halved: 0, 0.5 or 1.",
    )


def write_sheet(run_dir: Path, out: Path, judge: str | None = None, criteria: list[str] | None = None) -> SheetSummary:
    """One row per (case, system, criterion) the judge scored, with the response, the criterion's
    description and scale, and empty `label` and `feedback` cells. The judge's own scores are not in
    it: whoever labels does so blind. CSV in UTF-8 with a byte-order mark, so spreadsheets open it
    as UTF-8."""
    found = sheet_items(run_dir, judge, criteria)
    rows: list[list[str]] = []
    names: dict[str, None] = {}
    over_limit = 0
    counted: set[tuple[str, str]] = set()
    for item in found.items:
        if (item.case_id, item.system) not in counted:
            counted.add((item.case_id, item.system))
            over_limit += len(item.response) > SPREADSHEET_CELL_LIMIT
        names[f"{item.group}-*" if found.sub_criteria else item.criterion] = None
        rows.append(
            [
                item.case_id,
                item.system,
                item.criterion,
                item.scale,
                "",
                "",
                _escaped(item.description),
                _escaped(item.criterion_text),
                _escaped(item.query),
                _escaped(item.persona),
                _escaped(item.response),
            ]
        )
    judge = found.judge
    wanted = {item.case_id for item in found.items}
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, dialect="excel")
    writer.writerow(SHEET_COLUMNS)
    writer.writerows(rows)
    try:
        with no_follow.open_file(out, "w", encoding="utf-8-sig", newline="") as fh:  # a BOM: spreadsheets read UTF-8
            fh.write(buffer.getvalue())
    except OSError as exc:
        raise DataError(f"cannot write the sheet: {exc.strerror}", file=out) from None
    return SheetSummary(
        path=str(out),
        run=str(run_dir),
        judge=judge,
        rows=len(rows),
        responses=len({(r[0], r[1]) for r in rows}),
        criteria=list(names),
        cases_without_query=[c for c in found.cases_without_query if c in wanted],
        responses_over_cell_limit=over_limit,
    )
