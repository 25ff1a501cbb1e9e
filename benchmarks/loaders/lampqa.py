"""LaMP-QA: personalized long-form question answering (StackExchange askers).

A record has the user's current `question`, their `profile` (earlier questions, each with the
detailed description they wrote) and, for judges only, the current question's `narrative` and the
`rubric_aspects` extracted from it (aspect, reason, evidence; scored 0-2 per aspect).

The data is not in ../shared/data: point the option `data_file` at one downloaded split of one
category (Hugging Face alireza7/LaMP-QA: Art_and_Entertainment, Lifestyle_and_Personal_Development,
Society_and_Culture), as a JSON array or JSON Lines. Profile items are read as `{id, text,
description}` (the past question and its narrative); `ProfileItem` is the place to adapt if a
release names them differently.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from atelier.benchmarks.case import Case, Gold, PastQuestion, Query, RubricAspect
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.loaders._records import (
    RawRecord,
    deterministic_subset,
    existing_path,
    index_unique,
    read_json_or_jsonl,
)
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "lampqa"


class ProfileItem(RawRecord):
    id: str | int
    text: str = Field(min_length=1, description="An earlier question of the user.")
    description: str = Field(default="", description="The narrative the user wrote for it.")


class AspectRecord(RawRecord):
    aspect: str = Field(min_length=1)
    reason: str = ""
    evidence: str = ""


class LampQARecord(RawRecord):
    id: str | int
    question: str = Field(min_length=1)
    profile: list[ProfileItem]
    narrative: str = ""
    rubric_aspects: list[AspectRecord] = Field(min_length=1)


def read_records(path: Path) -> list[LampQARecord]:
    records = read_json_or_jsonl(path, LampQARecord)
    index_unique(records, lambda r: str(r.id), file=path, field="id")
    for i, record in enumerate(records):
        index_unique(record.profile, lambda p: str(p.id), file=path, field=f"[{i}].profile.id")
    return records


def record_case(record: LampQARecord, setting: str) -> Case:
    return Case(
        id=f"{NAME}:{record.id}",
        benchmark=NAME,
        user_id=f"{NAME}:{record.id}",  # the release identifies questions, not askers
        query=Query(text=record.question),
        setting=setting,
        history=[PastQuestion(id=f"profile:{p.id}", question=p.text, narrative=p.description) for p in record.profile],
        gold=Gold(
            narrative=record.narrative or None,
            information_need=record.narrative or None,
            rubric_aspects=[
                RubricAspect(aspect=a.aspect, reason=a.reason, evidence=a.evidence) for a in record.rubric_aspects
            ],
        ),
    )


class LampQAOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data_file: Path | None = Field(default=None, description="A LaMP-QA split file (JSON array or JSON Lines).")


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, LampQAOptions)
    if options.data_file is None:
        raise ConfigError(
            "lampqa data is not in the data directory; download a split of alireza7/LaMP-QA and pass "
            "the option data_file=<path to the .json/.jsonl file>"
        )
    records = read_records(existing_path(options.data_file, "data_file"))
    cases = [record_case(r, request.setting) for r in records]
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=NAME)


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="LaMP-QA: personalized long-form QA with the asker's past questions; rubric aspects for judges.",
        splits=("file",),
        settings=("profile", "task_only"),
        load=load,
        options=LampQAOptions,
    )
)
