"""DeepResearch Bench: 100 PhD-level research tasks (50 en, 50 zh) — the non-personalized control.

Each task's criteria (RACE: comprehensiveness, insight, instruction following, readability; each a
weighted list of criteria) go to `Gold.criteria`, the per-task dimension weights to
`Gold.dimension_weights`. There is no user history: every task is its own anonymous user.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from atelier.benchmarks.case import Case, Criterion, Gold, Query
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import RawRecord, deterministic_subset, index_unique, read_jsonl
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "drb"
QUERY_RELPATH = "deep_research_bench/query.jsonl"
CRITERIA_RELPATH = "deep_research_bench/criteria.jsonl"


def _finite_non_negative(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a weight must be a finite number >= 0, got {value}")
    return value


class TaskRecord(RawRecord):
    id: StrictInt
    topic: str = Field(min_length=1)
    language: Literal["en", "zh"]
    prompt: str = Field(min_length=1)


class CriterionRecord(RawRecord):
    criterion: str = Field(min_length=1)
    explanation: str = ""
    weight: float

    _weight = field_validator("weight")(_finite_non_negative)


class CriteriaRecord(RawRecord):
    id: str | StrictInt  # upstream writes it as a string
    prompt: str = Field(min_length=1)
    dimension_weight: dict[str, float] = Field(min_length=1)
    criterions: dict[str, list[CriterionRecord]] = Field(min_length=1)

    @field_validator("dimension_weight")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for weight in value.values():
            _finite_non_negative(weight)
        return value


def read_tasks(path: Path) -> list[TaskRecord]:
    tasks = read_jsonl(path, TaskRecord)
    index_unique(tasks, lambda t: t.id, file=path, field="id")
    return tasks


def read_criteria(path: Path) -> dict[int, CriteriaRecord]:
    records = read_jsonl(path, CriteriaRecord)
    by_id: dict[int, CriteriaRecord] = {}
    for number, record in enumerate(records, start=1):
        if not str(record.id).isdigit():
            raise DataError(f"task id {record.id!r} is not a number", file=path, line=number, field="id")
        if set(record.criterions) != set(record.dimension_weight):
            raise DataError(
                "criterions and dimension_weight name different dimensions", file=path, line=number, field="criterions"
            )
        by_id[int(record.id)] = record
    index_unique(records, lambda r: int(r.id), file=path, field="id")
    return by_id


def count_tasks(path: Path) -> dict[str, int]:
    return {"tasks": len(read_tasks(path))}


def count_criteria(path: Path) -> dict[str, int]:
    criteria = read_criteria(path)
    return {
        "criteria sets": len(criteria),
        "criteria": sum(len(v) for c in criteria.values() for v in c.criterions.values()),
    }


def task_case(task: TaskRecord, criteria: CriteriaRecord, setting: str) -> Case:
    return Case(
        id=f"{NAME}:{task.id}",
        benchmark=NAME,
        user_id=f"{NAME}:{task.id}",
        query=Query(text=task.prompt, language=task.language),
        setting=setting,
        task_id=str(task.id),
        domain=task.topic,
        meta={"language": task.language},
        gold=Gold(
            criteria=[
                Criterion(dimension=dimension, criterion=c.criterion, explanation=c.explanation, weight=c.weight)
                for dimension, items in criteria.criterions.items()
                for c in items
            ],
            dimension_weights=dict(criteria.dimension_weight),
        ),
    )


class DrbOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: Literal["en", "zh", "all"] = "en"


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, DrbOptions)
    criteria_path = resolve(CRITERIA_RELPATH)
    criteria = read_criteria(criteria_path)
    cases = []
    for task in read_tasks(resolve(QUERY_RELPATH)):
        if options.language not in ("all", task.language):
            continue
        if task.id not in criteria:
            raise DataError(f"no criteria for task {task.id}", file=criteria_path, field="id")
        cases.append(task_case(task, criteria[task.id], request.setting))
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=f"{NAME}:{options.language}")


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="DeepResearch Bench: 100 research tasks with weighted RACE criteria (non-personalized control).",
        splits=("all",),
        settings=("task_only",),
        load=load,
        options=DrbOptions,
        data_files=(QUERY_RELPATH, CRITERIA_RELPATH),
    )
)
