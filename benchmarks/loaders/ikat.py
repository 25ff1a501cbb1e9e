"""TREC iKAT: conversational search with a personal text knowledge base (PTKB) per topic.

One case per turn; the user is the topic (its PTKB is the user's history, one `PTKBStatement` per
statement). `query.text` is the raw utterance, `query.resolved` the manually resolved one and
`query.previous_turns` the topic's earlier turns (raw utterances with the canonical responses);
which of raw/resolved a retrieval evaluation uses is the caller's choice.

Gold relevant PTKB statements come from the turn's `ptkb_provenance` (option `qrels="provenance"`,
the default), or from the 2023 test relevance files (`qrels="nist"`: NIST assessors' judgments,
98 judged turns; `qrels="org"`: the organisers'), whose grades go into `Gold.relevance`.

Topic formats: 2023/2024 (`ptkb` is an object of numbered statements; `turns` with `utterance` and
`ptkb_provenance` as statement numbers) and 2025 (`ptkb` is a list; `responses` with
`user_utterance` and `relevant_ptkbs` as statement texts). 2025 topics are not in ../shared/data:
point the option `topics_file` at `2025_test_topics.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from atelier.benchmarks.case import Case, ConversationTurn, Gold, PTKBStatement, Query
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import (
    RawRecord,
    deterministic_subset,
    existing_path,
    index_unique,
    read_json,
    read_jsonl,
    read_text,
    text_lines,
    validate_array,
)
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "ikat"
TOPIC_FILES = {
    "2023_train": "ikat/2023_train_topics.json",
    "2023_test": "ikat/2023_test_topics.json",
    "2024_test": "ikat/2024_test_topics.json",
    "2025_test": None,  # not in ../shared/data: needs `topics_file`
}
QRELS_FILES = {"nist": "ikat/ptkb_rel_nist", "org": "ikat/ptkb_rel_org"}
QRELS_SPLIT = "2023_test"  # the split the PTKB relevance files judge
PASSAGE_FILES = ("ikat/2023_train_topics_psg_text.jsonl", "ikat/2023_test_topics_psg_text.jsonl")


# --------------------------------------------------------------------------- raw records


class Turn2023(RawRecord):
    turn_id: StrictInt
    utterance: str = Field(min_length=1)
    resolved_utterance: str  # empty in a few upstream turns
    response: str
    ptkb_provenance: list[StrictInt] = Field(default_factory=list)
    response_provenance: list[str] = Field(default_factory=list)


class Topic2023(RawRecord):
    """2023 and 2024 topics (2024 numbers topics with integers)."""

    number: str | StrictInt
    title: str
    ptkb: dict[str, str] = Field(min_length=1)
    turns: list[Turn2023] = Field(min_length=1)


class Turn2025(RawRecord):
    turn_id: StrictInt
    user_utterance: str = Field(min_length=1)
    resolved_utterance: str
    response: str
    relevant_ptkbs: list[str] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)


class Topic2025(RawRecord):
    number: str | StrictInt
    title: str
    ptkb: list[str] = Field(min_length=1)
    responses: list[Turn2025] = Field(min_length=1)


class PassageRecord(RawRecord):
    doc_id: str = Field(min_length=1)
    passage_id: str
    passage_text: str


class QrelLine(BaseModel):
    model_config = ConfigDict(frozen=True)
    topic: str
    turn_id: int
    ptkb_id: str
    grade: int

    @field_validator("grade")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("relevance grades are >= 0")
        return value


# --------------------------------------------------------------------------- normalised topics


@dataclass(frozen=True)
class TurnData:
    turn_id: int
    utterance: str
    resolved: str
    response: str
    relevant_ptkb: tuple[str, ...]  # statement ids


@dataclass(frozen=True)
class TopicData:
    number: str
    title: str
    ptkb: dict[str, str]  # statement id -> text, in file order
    turns: tuple[TurnData, ...]


def _from_2023(topic: Topic2023, path: Path, index: int) -> TopicData:
    turns = []
    for t in topic.turns:
        for ptkb_id in t.ptkb_provenance:
            if str(ptkb_id) not in topic.ptkb:
                raise DataError(
                    f"PTKB statement {ptkb_id} is not in topic {topic.number}'s ptkb",
                    file=path,
                    field=f"[{index}].turns.turn_id={t.turn_id}.ptkb_provenance",
                )
        turns.append(
            TurnData(
                turn_id=t.turn_id,
                utterance=t.utterance,
                resolved=t.resolved_utterance,
                response=t.response,
                relevant_ptkb=tuple(str(p) for p in t.ptkb_provenance),
            )
        )
    return TopicData(number=str(topic.number), title=topic.title, ptkb=dict(topic.ptkb), turns=tuple(turns))


def _from_2025(topic: Topic2025, path: Path, index: int) -> TopicData:
    ptkb = {str(i): text for i, text in enumerate(topic.ptkb, start=1)}
    id_of = {text: key for key, text in ptkb.items()}
    turns = []
    for t in topic.responses:
        missing = [text for text in t.relevant_ptkbs if text not in id_of]
        if missing:
            raise DataError(
                f"relevant PTKB statement {missing[0]!r} is not in topic {topic.number}'s ptkb",
                file=path,
                field=f"[{index}].responses.turn_id={t.turn_id}.relevant_ptkbs",
            )
        turns.append(
            TurnData(
                turn_id=t.turn_id,
                utterance=t.user_utterance,
                resolved=t.resolved_utterance,
                response=t.response,
                relevant_ptkb=tuple(id_of[text] for text in t.relevant_ptkbs),
            )
        )
    return TopicData(number=str(topic.number), title=topic.title, ptkb=ptkb, turns=tuple(turns))


def read_topics(path: Path) -> list[TopicData]:
    """Topics of either format (told apart by the first topic's keys), checked for duplicate ids."""
    data = read_json(path)
    if not isinstance(data, list) or not data:
        raise DataError("expected a non-empty JSON array of topics", file=path)
    is_2025 = isinstance(data[0], dict) and "responses" in data[0]
    topics = (
        [_from_2025(t, path, i) for i, t in enumerate(validate_array(data, Topic2025, file=path))]
        if is_2025
        else [_from_2023(t, path, i) for i, t in enumerate(validate_array(data, Topic2023, file=path))]
    )
    index_unique(topics, lambda t: t.number, file=path, field="number")
    for i, topic in enumerate(topics):
        index_unique(topic.turns, lambda t: t.turn_id, file=path, field=f"[{i}].turn_id")
    return topics


def read_qrels(path: Path) -> dict[tuple[str, int], dict[str, int]]:
    """`<topic>_<turn> 0 <ptkb_id> <grade>` lines -> {(topic, turn): {ptkb_id: grade}}."""
    judged: dict[tuple[str, int], dict[str, int]] = {}
    for number, line in enumerate(text_lines(read_text(path)), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise DataError(
                f"expected 4 columns '<topic>_<turn> 0 <ptkb_id> <grade>', found {len(parts)}", file=path, line=number
            )
        qid, _, ptkb_id, grade = parts
        topic, sep, turn = qid.rpartition("_")
        if not sep or not topic or not turn.isdigit():
            raise DataError(f"query id {qid!r} is not '<topic>_<turn>'", file=path, line=number, field="query id")
        if not grade.lstrip("-").isdigit():
            raise DataError(f"relevance grade {grade!r} is not an integer", file=path, line=number, field="grade")
        try:
            row = QrelLine(topic=topic, turn_id=int(turn), ptkb_id=ptkb_id, grade=int(grade))
        except ValueError as exc:
            raise DataError(str(exc).splitlines()[-1], file=path, line=number, field="grade") from None
        judged.setdefault((row.topic, row.turn_id), {})[row.ptkb_id] = row.grade
    return judged


def check_qrels_refer_to_topics(
    judged: dict[tuple[str, int], dict[str, int]], topics: list[TopicData], path: Path
) -> None:
    """Every judgment names a topic, turn and PTKB statement that exist."""
    by_number = {t.number: t for t in topics}
    for (number, turn_id), grades in judged.items():
        topic = by_number.get(number)
        if topic is None or turn_id not in {t.turn_id for t in topic.turns}:
            raise DataError(f"judged turn {number}_{turn_id} is not in the topics", file=path, field="query id")
        unknown = sorted(set(grades) - set(topic.ptkb))
        if unknown:
            raise DataError(
                f"PTKB statement {unknown[0]} is not in topic {number}'s ptkb", file=path, field=f"{number}_{turn_id}"
            )


def count_topics(path: Path) -> dict[str, int]:
    topics = read_topics(path)
    return {"topics": len(topics), "turns": sum(len(t.turns) for t in topics)}


def count_qrels(path: Path) -> dict[str, int]:
    judged = read_qrels(path)
    return {"judged turns": len(judged), "judgments": sum(len(v) for v in judged.values())}


def count_passages(path: Path) -> dict[str, int]:
    return {"passages": len(read_jsonl(path, PassageRecord))}


# --------------------------------------------------------------------------- cases


class IkatOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    qrels: Literal["provenance", "nist", "org"] = Field(
        default="provenance",
        description="Gold PTKB relevance: the turn's ptkb_provenance, or a 2023 test judgment file.",
    )
    topics_file: Path | None = Field(
        default=None, description="Read topics from this file instead (needed for 2025_test)."
    )


def ptkb_event_id(statement_id: str) -> str:
    return f"ptkb:{statement_id}"


def topic_cases(
    topic: TopicData, split: str, setting: str, judged: dict[tuple[str, int], dict[str, int]] | None
) -> list[Case]:
    user_id = f"{NAME}:{split}:{topic.number}"
    history = [PTKBStatement(id=ptkb_event_id(key), text=text) for key, text in topic.ptkb.items()]
    cases = []
    for position, turn in enumerate(topic.turns):
        if judged is None:
            relevance: dict[str, int] = {}
            relevant = [ptkb_event_id(p) for p in turn.relevant_ptkb]
        else:
            grades = judged.get((topic.number, turn.turn_id), {})
            relevance = {ptkb_event_id(p): g for p, g in grades.items()}
            relevant = [event for event, grade in relevance.items() if grade > 0]
        cases.append(
            Case(
                id=f"{NAME}:{split}:{topic.number}:{turn.turn_id}",
                benchmark=NAME,
                user_id=user_id,
                query=Query(
                    text=turn.utterance,
                    resolved=turn.resolved or None,
                    previous_turns=[
                        ConversationTurn(utterance=prior.utterance, response=prior.response)
                        for prior in topic.turns[:position]
                    ],
                ),
                setting=setting,
                task_id=topic.number,
                clusters={"topic": f"{split}:{topic.number}"},
                domain=topic.title,
                history=history,
                meta={"topic": topic.number, "turn_id": turn.turn_id, "title": topic.title, "split": split},
                gold=Gold(relevant_history_ids=relevant, relevance=relevance, answer=turn.response or None),
            )
        )
    return cases


def _topics_path(split: str, options: IkatOptions) -> Path:
    if options.topics_file is not None:
        return existing_path(options.topics_file, "topics_file")
    relpath = TOPIC_FILES[split]
    if relpath is None:
        raise ConfigError(
            f"ikat split {split!r} is not in the data directory; pass the option topics_file=<path to 2025_test_topics.json>"
        )
    return resolve(relpath)


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, IkatOptions)
    judged = None
    if options.qrels != "provenance":
        if request.split != QRELS_SPLIT:
            raise ConfigError(
                f"ikat qrels={options.qrels!r} judges only the {QRELS_SPLIT} split, not {request.split!r}"
            )
        judged = read_qrels(resolve(QRELS_FILES[options.qrels]))
    topics = read_topics(_topics_path(request.split, options))
    if judged is not None:
        check_qrels_refer_to_topics(judged, topics, resolve(QRELS_FILES[options.qrels]))
    cases = [case for topic in topics for case in topic_cases(topic, request.split, request.setting, judged)]
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=f"{NAME}:{request.split}")


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="TREC iKAT: per-turn conversational queries with a personal text knowledge base (PTKB).",
        splits=tuple(TOPIC_FILES),
        settings=("ptkb", "task_only"),
        load=load,
        options=IkatOptions,
        default_split="2023_test",
        default_setting="ptkb",
        data_files=tuple(p for p in TOPIC_FILES.values() if p) + tuple(QRELS_FILES.values()),
    )
)
