"""The results file of a run: one JSON line per (case, system, epoch), appended atomically.

Each line has an idempotent key `<case id>::<system>` — `<case id>::<system>::epoch<k>` for the
epochs after the first (`[run] epochs`), so a run of one epoch keeps the keys runs always had, and
a run given more epochs later resumes its first; a counterfactual control's episode (`[run]
controls`) is `<case id>::<system>::control=<kind>` (and its epoch after it). A resumed run skips keys already
finished; an episode that failed is recorded with its reason and retried on resume, and when a
key appears more than once the last line wins — so nothing is lost or counted twice.

Lines and JSON files are written with the run's keys redacted (`benchmarks.common.redaction`).
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, computed_field, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from atelier.agents.judges.base import JudgeResult
from atelier.agents.judges.contract import as_recorded
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import Degradation
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import read_appended_jsonl, validation_error
from atelier.benchmarks.common.redaction import active_redactor
from atelier.benchmarks.controls import ControlKind
from atelier.memory.base import ContextShare

# the validation context of a record read from a results file: its `scores` map is checked against
# its judgments (`ResultRecord._scores_of_its_judgments`)
READ_BACK = {"read_back": True}


def _shown(score: float | None) -> str:
    return "null" if score is None else repr(score) if math.isfinite(score) else str(score)


def _same_score(a: float | None, b: float | None) -> bool:
    """Whether a `scores` entry is its judgment's score as written: equal but for float rounding (a
    NaN copied from a NaN judgment is the same too: the judgment is then read as failed)."""
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def result_key(case_id: str, system: str, epoch: int = 1, control: str | None = None) -> str:
    """The idempotent key of one episode; the first epoch's is `<case id>::<system>`. A control
    episode's (`[run] controls`) adds `::control=<kind>` before the epoch."""
    key = f"{case_id}::{system}" if control is None else f"{case_id}::{system}::control={control}"
    return key if epoch == 1 else f"{key}::epoch{epoch}"


class ContextUsed(BaseModel):
    backend: str
    form: str
    event_ids: list[str] = Field(default_factory=list)
    tokens: int = 0
    text: str = Field(default="", description="The recalled memory as the system received it.")
    degraded: list[Degradation] = Field(default_factory=list)
    share: ContextShare | None = Field(
        default=None, description="What the budget kept of the memory offered (backends that pack events)."
    )


class ResultRecord(BaseModel):
    key: str
    run_id: str
    case_id: str
    system: str
    benchmark: str
    user_id: str
    setting: str
    epoch: int = Field(
        default=1, ge=1, description="Which run of this (case, system) it is (`[run] epochs`); 1 for a single run."
    )
    control: ControlKind | None = Field(
        default=None,
        description="The counterfactual control this episode is (`[run] controls`: swapped, no_context, "
        "shuffled_history), judged against the case's own user; None for the system's own episode. Controls "
        "never enter the system's means: they give the personalization effect (summary.json `personalization`).",
    )
    status: str = Field(description="ok | error")
    error: str | None = None
    response: SystemResponse | None = Field(
        default=None, description="The whole response (text, citations, meta), so it can be judged again."
    )
    user_context: ContextUsed | None = None
    contract: list[Degradation] = Field(
        default_factory=list,
        description="What the run's own contract checks found beyond memory's, the system's and the judges' "
        "records (benchmarks/common/contract.py): the clause a failed episode broke, and what the answers of the "
        "system's model calls broke of the provider contract (cut, filtered, unfinished reasoning).",
    )
    judgments: list[JudgeResult] = Field(default_factory=list)
    scores: dict[str, float | None] = Field(
        default_factory=dict,
        validate_default=True,  # a line without the map gets its judgments' scores
        description="Headline score per judge: a copy of each judgment's score (`{j.judge: j.score}`, as every "
        "record is written). Read back from a results file, it is checked against the judgments and derived from "
        "them held to their scale: an entry that disagrees with its judgment (a NaN, 35 for a judgment of 3.0, a "
        "judge with no judgment) is refused naming its line and field, and one left out is filled in.",
    )
    # finite, so what is written reads back: JSON has no NaN (pydantic would write null), and a file
    # holding one is refused where it is read, naming its line, rather than copied on (a rescore)
    resumed_from: str | None = Field(
        default=None,
        description="The step an episode continued from when an earlier process of the run left it "
        "unfinished (its last checkpoint's next step: recall, direct, judge, ...); None when it ran from its start.",
    )
    latency_s: float = Field(default=0.0, allow_inf_nan=False, description="The episode's wall time in seconds.")
    ingest_s: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="Of its wall time, the seconds its memory's ingest step took: the ingest of its user's history, "
        "or the wait for another episode's ingest of the same user (memory cost, not the episode's).",
    )
    dry_run: bool = False
    cost_usd: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="What the episode's provider calls cost (its ledger lines; cache hits cost nothing); "
        "None when a call had no price or the record predates it.",
    )
    finished_at: float = 0.0
    made_by: str | None = Field(
        default=None,
        description="The digest of the system identity that made this output (`runs.folder.resume.output_digest`): "
        "a resumed run refuses an output another recipe made. None in records written before it was kept.",
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @computed_field(  # type: ignore[prop-decorator]  # pydantic's documented form; mypy takes no decorator above @property
        description="Every degraded step of the episode: memory's, the system's, then each judge's "
        "(each is also kept where it happened)."
    )
    @property
    def degraded(self) -> list[Degradation]:
        return [*self.system_degraded, *(d for j in self.judgments for d in j.degraded)]

    @property
    def system_degraded(self) -> list[Degradation]:
        """What degraded before any judge: in memory and in the system's pipeline."""
        return [
            *(self.user_context.degraded if self.user_context else []),
            *(self.response.degraded if self.response else []),
            *self.contract,
        ]

    @field_validator("scores")
    @classmethod
    def _scores_of_its_judgments(cls, scores: dict[str, float | None], info: ValidationInfo) -> dict[str, float | None]:
        """Read back from a results file (`READ_BACK`): the judgments' scores, the map refused where an
        entry is not its judgment's score as written (a hand edit, a damaged line: never summed in
        place of the judgment). Records built in memory are kept as given."""
        if not (info.context or {}).get("read_back") or "judgments" not in info.data:
            return scores  # judgments that do not validate are refused on their own
        recorded = {j.judge: j.score for j in info.data["judgments"]}
        for judge, score in scores.items():
            if judge not in recorded:
                problem = f"{_shown(score)} but no judgment of {judge!r} is recorded"
            elif not _same_score(score, recorded[judge]):
                problem = f"{_shown(score)} but its judgment says {_shown(recorded[judge])}"
            else:
                continue
            error = PydanticCustomError("score_not_its_judgments", "{problem}", {"problem": problem})
            raise ValidationError.from_exception_data(
                cls.__name__, [InitErrorDetails(type=error, loc=(judge,), input=score)]
            )  # pydantic puts it under `scores`: field 'scores.<judge>'
        return recorded

    @model_validator(mode="after")
    def _judgments_on_their_scale(self) -> ResultRecord:
        """Judgments held to the scale each records (agents/judges/contract.py): what a results file
        holds (a score off its scale, NaN) is read as a failed judgment saying so, never summed."""
        held = [as_recorded(j) for j in self.judgments]
        if any(h is not j for h, j in zip(held, self.judgments)):
            self.judgments = held
            self.scores = {**self.scores, **{j.judge: j.score for j in held}}
        return self

    @field_validator("response", mode="before")
    @classmethod
    def _text_only(cls, value: object) -> object:
        """Result files written before responses were kept whole hold the text alone."""
        return {"text": value} if isinstance(value, str) else value

    def with_judgments(self, judgments: list[JudgeResult]) -> ResultRecord:
        """This record with `judgments` added, replacing earlier ones of the same judges."""
        keys = {j.judge for j in judgments}
        kept = [j for j in self.judgments if j.judge not in keys] + judgments
        return self.model_copy(update={"judgments": kept, "scores": {j.judge: j.score for j in kept}})


class ResultsFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.torn_line: int | None = None  # the torn last line the latest `load` left unread

    def torn(self) -> str | None:
        """What the latest `load` left unread, said for a reader ("...: its episode counts as not run")."""
        if self.torn_line is None:
            return None
        return (
            f"{self.path}:{self.torn_line}: a torn last line was not read (the run stopped while writing it): its "
            "episode counts as not run, and running the recipe again into this folder redoes it"
        )

    def load(self, repair: bool = False) -> dict[str, ResultRecord]:
        """The latest record per key. A torn last line (the process died while writing it) is
        dropped, and its episode redone — with `repair`, also dropped from the file, before the run
        appends again. Any other bad line is an error naming the line."""
        records: dict[str, ResultRecord] = {}
        lines = read_appended_jsonl(self.path, repair=repair)
        self.torn_line = lines.torn_line
        for number, data in lines.values:
            try:
                record = ResultRecord.model_validate(data, context=READ_BACK)
            except ValidationError as exc:
                raise validation_error(exc, file=self.path, line=number) from None
            expected = result_key(record.case_id, record.system, record.epoch, record.control)
            if record.key != expected:  # summaries group by system, resume by key
                raise DataError(
                    f"key {record.key!r} is not its case, system and epoch (and control, in a control episode) "
                    f"({expected!r}): the line was edited or damaged",
                    file=self.path,
                    line=number,
                    field="key",
                )
            records[record.key] = record
        return records

    def append(self, record: ResultRecord) -> None:
        line = active_redactor().redact(record.model_dump_json()) + "\n"
        with self._lock:
            with no_follow.open_file(self.path, "a") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())


def write_json_atomic(path: str | Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    write_atomically(path, active_redactor().redact(text))
