"""LoCoMo: very long multi-session conversations between two speakers, with QA items about them.

The user is the conversation (`sample_id`); its sessions become `DialogueTurn` history events with
the upstream `dia_id` (e.g. `D1:3`) as id, the session name and the session's date. An image a
speaker shared is kept as its BLIP caption, as the LoCoMo paper does for text-only models.
Each QA item is a case: `Gold.answer` is the answer, evidence dialogue ids are the relevant history.

Category 5 items are adversarial: they ask about something never said and carry an
`adversarial_answer` (the tempting wrong answer) instead of `answer`; the correct reply is that the
conversation does not mention it (the LoCoMo evaluation's "Not mentioned in the conversation").

Upstream evidence ids have a few typos (`D:11:26`, `D30:05`, several ids in one string); they are
normalised, and ids that still name no turn are dropped (their number is in `meta`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from atelier.benchmarks.case import Case, DialogueTurn, Gold, Query
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import RawRecord, deterministic_subset, index_unique, read_json_array
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "locomo"
RELPATH = "locomo/locomo10.json"
# The category numbers as LoCoMo's released data uses them (mem0's and LoCoMo's evaluation code).
CATEGORY_NAMES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
ADVERSARIAL = 5
NOT_MENTIONED = "Not mentioned in the conversation"

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")


class TurnRecord(RawRecord):
    speaker: str = Field(min_length=1)
    dia_id: str = Field(min_length=1)
    text: str
    blip_caption: str | None = None


class QARecord(RawRecord):
    question: str = Field(min_length=1)
    answer: str | StrictInt | float | None = None
    adversarial_answer: str | None = None
    evidence: list[str] = Field(default_factory=list)
    category: Literal[1, 2, 3, 4, 5]

    @model_validator(mode="after")
    def _has_an_answer(self) -> QARecord:
        if self.category == ADVERSARIAL and self.adversarial_answer is None:
            raise ValueError("a category 5 item needs 'adversarial_answer'")
        if self.category != ADVERSARIAL and self.answer is None:
            raise ValueError(f"a category {self.category} item needs 'answer'")
        return self


class SessionRecord(RawRecord):
    name: str
    date: str | None = None
    turns: list[TurnRecord]


class ConversationRecord(RawRecord):
    """Upstream keys `session_<n>` (turns) and `session_<n>_date_time`, grouped into sessions."""

    speaker_a: str
    speaker_b: str
    sessions: list[SessionRecord] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _group_sessions(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        names = sorted((k for k in data if _SESSION_KEY.fullmatch(k)), key=lambda k: int(k.split("_")[1]))
        return {
            "speaker_a": data.get("speaker_a"),
            "speaker_b": data.get("speaker_b"),
            "sessions": [{"name": n, "date": data.get(f"{n}_date_time"), "turns": data[n]} for n in names],
        }


class SampleRecord(RawRecord):
    sample_id: str = Field(min_length=1)
    conversation: ConversationRecord
    qa: list[QARecord]


def normalise_evidence(raw: list[str]) -> list[str]:
    """Evidence strings -> canonical dia ids (`D:11:26` -> `D11:26`, `D30:05` -> `D30:5`, split lists)."""
    return [f"D{m.group(1)}:{m.group(2)}" for item in raw for m in _DIA_ID.finditer(item)]


def unresolved_evidence(raw: list[str], known: set[str]) -> int:
    """How many evidence references name no turn of the conversation (after normalisation)."""
    return sum(1 for item in raw for e in (normalise_evidence([item]) or [item]) if e not in known)


def read_samples(path: Path) -> list[SampleRecord]:
    samples = read_json_array(path, SampleRecord)
    index_unique(samples, lambda s: s.sample_id, file=path, field="sample_id")
    return samples


def count_samples(path: Path) -> dict[str, int]:
    samples = read_samples(path)
    return {"conversations": len(samples), "qa items": sum(len(s.qa) for s in samples)}


def sample_history(sample: SampleRecord, path: Path, index: int) -> list[DialogueTurn]:
    history = []
    for session in sample.conversation.sessions:
        for turn in session.turns:
            text = turn.text + (f" [shares an image: {turn.blip_caption}]" if turn.blip_caption else "")
            history.append(
                DialogueTurn(
                    id=turn.dia_id, speaker=turn.speaker, text=text, session=session.name, timestamp=session.date
                )
            )
    index_unique(history, lambda e: e.id, file=path, field=f"[{index}].conversation dia_id")
    return history


def sample_cases(sample: SampleRecord, history: list[DialogueTurn], setting: str) -> list[Case]:
    known = {e.id for e in history}
    cases = []
    for i, qa in enumerate(sample.qa):
        evidence = normalise_evidence(qa.evidence)
        relevant = list(dict.fromkeys(e for e in evidence if e in known))
        adversarial = qa.category == ADVERSARIAL
        cases.append(
            Case(
                id=f"{NAME}:{sample.sample_id}:{i}",
                benchmark=NAME,
                user_id=sample.sample_id,
                clusters={"conversation": sample.sample_id},
                query=Query(text=qa.question),
                setting=setting,
                history=history,
                meta={
                    "category": qa.category,
                    "category_name": CATEGORY_NAMES[qa.category],
                    "evidence_unresolved": unresolved_evidence(qa.evidence, known),
                },
                gold=Gold(
                    answer=NOT_MENTIONED if adversarial else str(qa.answer),
                    adversarial_answer=qa.adversarial_answer if adversarial else None,
                    relevant_history_ids=relevant,
                ),
            )
        )
    return cases


class LocomoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    categories: list[Literal[1, 2, 3, 4, 5]] = Field(
        default=[1, 2, 3, 4, 5], description="QA categories to load (5 = adversarial)."
    )


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, LocomoOptions)
    path = resolve(RELPATH)
    cases: list[Case] = []
    for index, sample in enumerate(read_samples(path)):
        history = sample_history(sample, path, index)
        cases.extend(
            c for c in sample_cases(sample, history, request.setting) if c.meta["category"] in options.categories
        )
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=f"{NAME}:{request.split}")


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="LoCoMo: QA over 10 very long multi-session conversations (1,986 items, 5 categories).",
        splits=("all",),
        settings=("history", "task_only"),
        load=load,
        options=LocomoOptions,
        data_files=(RELPATH,),
    )
)
