"""The bundled sample suite, registered as benchmark `sample`.

A small, project-authored suite in `benchmarks/sample/` (schemas in its README.md): PDR-style
personas and research tasks, per-user implicit history (memory snippets, dialogues, chat and search
sessions), one case per (task, user) pair with BESPOKE/LaMP-QA-style gold, and a page corpus the
sandbox web serves. Settings follow PDR-Bench; `Case.view` decides what each setting exposes.

The pages supporting each gold claim are in `Gold.claim_sources`. Which persona trait each history
item came from is in `Case.history_traits`, which `Case.view` never passes to systems (facet
ablations and reversibility checks read it; so does `context_traits`).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from atelier.benchmarks.case import (
    Case,
    ChatMessage,
    ChatSession,
    Gold,
    MemorySnippet,
    Persona,
    Query,
    RJPair,
    RubricAspect,
    SearchQueryRecord,
    SearchSession,
    persona_facets,
)
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import parse_json
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

BENCHMARK = "sample"
SETTINGS = ("context", "task_only", "persona", "persona+context")
SPLITS = ("all", "dev", "test")
PERSONA_SECTIONS = (
    "Basic Attributes",
    "Behavioral Characteristics",
    "Environment",
    "Personality Traits",
    "Preferences and Interests",
    "Health Status",
    "Financial Information",
)
BESPOKE_CRITERIA = ("need_alignment", "content_depth", "tone", "explanation_style")
CONVERSATIONAL_TYPES = frozenset({"dialogue", "chat_session"})

PERSONAS_FILE = "personas.jsonl"
TASKS_FILE = "tasks.jsonl"
CONTEXTS_FILE = "contexts.jsonl"
QUERIES_FILE = "queries.jsonl"
PAGES_FILE = "pages.jsonl"


# --------------------------------------------------------------------------- raw records


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplePage(_Record):
    """One page of the sample web corpus (the sandbox web serves exactly these fields)."""

    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    title: str = Field(min_length=1)
    text: str = Field(min_length=1, description="Paragraphs separated by blank lines.")
    topic: str = Field(min_length=1)
    description: str = Field(min_length=1)
    url: str = Field(pattern=r"^https://[a-z0-9-]+(?:\.[a-z0-9-]+)*\.example/\S*$")


class PersonaRecord(_Record):
    """A persona in the PDR-Bench schema: `userid` plus seven nested sections of facets."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    userid: str = Field(min_length=1)
    basic_attributes: dict[str, Any] = Field(alias="Basic Attributes")
    behavioral_characteristics: dict[str, Any] = Field(alias="Behavioral Characteristics")
    environment: dict[str, Any] = Field(alias="Environment")
    personality_traits: dict[str, Any] = Field(alias="Personality Traits")
    preferences_and_interests: dict[str, Any] = Field(alias="Preferences and Interests")
    health_status: dict[str, Any] = Field(alias="Health Status")
    financial_information: dict[str, Any] = Field(alias="Financial Information")

    @field_validator("*", mode="after")
    @classmethod
    def _leaves_are_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for path, leaf in _leaves(value):
                if not isinstance(leaf, str) or not leaf.strip():
                    raise ValueError(f"facet '{path}' must be non-empty text")
        return value

    def attributes(self) -> dict[str, Any]:
        """The persona sections keyed by their PDR names, in schema order."""
        return self.model_dump(by_alias=True, exclude={"userid"})

    def trait_paths(self) -> set[str]:
        return {path for path, _ in persona_facets(self.attributes())}


def _leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        path = f"{prefix} > {key}" if prefix else key
        if isinstance(value, dict):
            yield from _leaves(value, path)
        else:
            yield path, value


class TaskRecord(_Record):
    """A PDR-style research task: one paragraph."""

    taskid: int = Field(ge=1)
    domain: str = Field(min_length=1)
    task: str = Field(min_length=1)


class _ContextItem(_Record):
    userid: str = Field(min_length=1)
    id: str = Field(min_length=1, description="Unique within the user, prefixed `<userid>:`.")
    date: dt.date
    trait: str = Field(min_length=1, description="Persona trait path (`Section > ... > Field`) it reflects.")


class MemorySnippetItem(_ContextItem):
    """PDR memory snippet: a short note the user left."""

    type: Literal["memory_snippet"]
    text: str = Field(min_length=1)

    def to_event(self) -> MemorySnippet:
        return MemorySnippet(id=self.id, timestamp=self.date.isoformat(), text=self.text)


class DialogueItem(_ContextItem):
    """PDR dialogue: a short everyday exchange with the phone assistant."""

    type: Literal["dialogue"]
    messages: list[ChatMessage] = Field(min_length=2)

    def to_event(self) -> ChatSession:
        return ChatSession(id=self.id, timestamp=self.date.isoformat(), messages=list(self.messages))


class ChatSessionItem(_ContextItem):
    """BESPOKE chat session: an information-seeking conversation with a titled thread."""

    type: Literal["chat_session"]
    title: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=2)

    def to_event(self) -> ChatSession:
        return ChatSession(id=self.id, timestamp=self.date.isoformat(), title=self.title, messages=list(self.messages))


class SearchSessionItem(_ContextItem):
    """BESPOKE search session: queries and the results the user opened."""

    type: Literal["search_session"]
    queries: list[SearchQueryRecord] = Field(min_length=1)

    def to_event(self) -> SearchSession:
        return SearchSession(id=self.id, timestamp=self.date.isoformat(), queries=list(self.queries))


ContextRecord = MemorySnippetItem | DialogueItem | ChatSessionItem | SearchSessionItem
ContextItem = Annotated[ContextRecord, Field(discriminator="type")]


class ClaimRecord(_Record):
    claim: str = Field(min_length=1)
    pages: list[str] = Field(min_length=1, description="Ids of the corpus pages that support the claim.")


class JudgmentRecord(_Record):
    criterion: Literal["need_alignment", "content_depth", "tone", "explanation_style"]
    score: int = Field(ge=1, le=5)
    feedback: str = Field(min_length=1)


class RJPairRecord(_Record):
    """A response with the user's BESPOKE judgment on each criterion."""

    response: str = Field(min_length=1)
    judgments: list[JudgmentRecord] = Field(min_length=1)

    def to_rj_pairs(self) -> list[RJPair]:
        return [
            RJPair(response=self.response, score=j.score, feedback=j.feedback, criterion=j.criterion)
            for j in self.judgments
        ]


class GoldRecord(_Record):
    information_need: str = Field(min_length=1)
    rubric_aspects: list[RubricAspect] = Field(min_length=1)
    information_claims: list[ClaimRecord] = Field(min_length=1)
    relevant_history_ids: list[str] = Field(min_length=1)
    rj_pairs: list[RJPairRecord] = Field(min_length=1)

    def to_gold(self) -> Gold:
        return Gold(
            information_need=self.information_need,
            rubric_aspects=list(self.rubric_aspects),
            information_claims=[c.claim for c in self.information_claims],
            claim_sources={c.claim: list(c.pages) for c in self.information_claims},
            relevant_history_ids=list(self.relevant_history_ids),
            rj_pairs=[pair for record in self.rj_pairs for pair in record.to_rj_pairs()],
        )


class QueryRecord(_Record):
    """One case: a task paired with a user who cares about it, with gold for judges."""

    id: str = Field(min_length=1)
    taskid: int
    userid: str = Field(min_length=1)
    gold: GoldRecord


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Row:
    file: str
    line: int
    record: Any

    def error(self, message: str, field: str) -> DataError:
        return DataError(message, file=self.file, line=self.line, field=field)


def _read_jsonl(root: Traversable, name: str, model: Any) -> list[_Row]:
    """Parse one JSONL file into validated records; a bad line raises DataError naming it."""
    source = root.joinpath(name)
    if not source.is_file():
        raise DataError("sample suite file is missing", file=str(source))
    adapter = TypeAdapter(model)
    rows: list[_Row] = []
    with source.open("r", encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            data = parse_json(raw, file=str(source), line=number)
            try:
                record = adapter.validate_python(data)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = _field_name(first["loc"], data)
                raise DataError(first["msg"], file=str(source), line=number, field=field) from None
            rows.append(_Row(str(source), number, record))
    return rows


def _field_name(loc: tuple[Any, ...], data: Any) -> str | None:
    """A validation error's location as `a.b.0.c`, without the union tag pydantic puts first for
    discriminated records (`memory_snippet.date` -> `date`): the tag is a value, not a field."""
    parts = list(loc)
    if parts and isinstance(data, dict) and parts[0] == data.get("type"):
        parts = parts[1:]
    return ".".join(str(part) for part in parts) or None


def _index(rows: list[_Row], key: str) -> dict[Any, _Row]:
    """Rows by a unique key attribute; a repeated key is a DataError on the repeating line."""
    out: dict[Any, _Row] = {}
    for row in rows:
        value = getattr(row.record, key)
        if value in out:
            raise row.error(f"duplicate {key} {value!r} (first on line {out[value].line})", key)
        out[value] = row
    return out


@dataclass(frozen=True)
class SampleSuite:
    """The parsed, cross-checked sample suite."""

    personas: dict[str, PersonaRecord]
    tasks: dict[int, TaskRecord]
    contexts: dict[str, tuple[ContextRecord, ...]]
    queries: tuple[QueryRecord, ...]
    pages: dict[str, SamplePage]

    def split_of(self, query: QueryRecord) -> str:
        """`dev` for the first half of the tasks by id, `test` for the rest (whole tasks, no overlap)."""
        ordered = sorted(self.tasks)
        return "dev" if query.taskid in ordered[: len(ordered) // 2] else "test"

    def case(self, query: QueryRecord, setting: str) -> Case:
        task = self.tasks[query.taskid]
        persona = self.personas[query.userid]
        return Case(
            id=query.id,
            benchmark=BENCHMARK,
            user_id=query.userid,
            query=Query(text=task.task),
            setting=setting,
            task_id=str(task.taskid),
            domain=task.domain,
            history=[item.to_event() for item in self.contexts.get(query.userid, ())],
            history_traits={item.id: item.trait for item in self.contexts.get(query.userid, ())},
            persona=Persona(user_id=persona.userid, attributes=persona.attributes()),
            gold=query.gold.to_gold(),
            meta={"split": self.split_of(query)},
            clusters={"user": query.userid},
        )


def read_suite(root: Traversable | Path) -> SampleSuite:
    """Parse and cross-check the suite in `root` (uncached; `load_suite()` reads the bundled one)."""
    persona_rows = _index(_read_jsonl(root, PERSONAS_FILE, PersonaRecord), "userid")
    task_rows = _index(_read_jsonl(root, TASKS_FILE, TaskRecord), "taskid")
    page_rows = _index(_read_jsonl(root, PAGES_FILE, SamplePage), "id")
    _index(list(page_rows.values()), "url")
    context_rows = _read_jsonl(root, CONTEXTS_FILE, ContextItem)
    _index(context_rows, "id")
    query_rows = _index(_read_jsonl(root, QUERIES_FILE, QueryRecord), "id")

    personas = {uid: row.record for uid, row in persona_rows.items()}
    contexts: dict[str, list[ContextRecord]] = {}
    for row in context_rows:
        item = row.record
        if item.userid not in personas:
            raise row.error(f"unknown user {item.userid!r}", "userid")
        if not item.id.startswith(f"{item.userid}:"):
            raise row.error(f"id must start with '{item.userid}:'", "id")
        if item.trait not in personas[item.userid].trait_paths():
            raise row.error(f"trait path {item.trait!r} is not a facet of persona {item.userid!r}", "trait")
        contexts.setdefault(item.userid, []).append(item)

    for row in query_rows.values():
        query = row.record
        if query.taskid not in task_rows:
            raise row.error(f"unknown task {query.taskid}", "taskid")
        if query.userid not in personas:
            raise row.error(f"unknown user {query.userid!r}", "userid")
        known = {item.id for item in contexts.get(query.userid, ())}
        for i, event_id in enumerate(query.gold.relevant_history_ids):
            if event_id not in known:
                raise row.error(f"{event_id!r} is not in {query.userid}'s history", f"gold.relevant_history_ids.{i}")
        for i, claim in enumerate(query.gold.information_claims):
            for j, page_id in enumerate(claim.pages):
                if page_id not in page_rows:
                    raise row.error(f"unknown page {page_id!r}", f"gold.information_claims.{i}.pages.{j}")

    return SampleSuite(
        personas=personas,
        tasks={tid: row.record for tid, row in task_rows.items()},
        contexts={uid: tuple(sorted(items, key=lambda it: (it.date, it.id))) for uid, items in contexts.items()},
        queries=tuple(row.record for row in query_rows.values()),
        pages={pid: row.record for pid, row in page_rows.items()},
    )


def bundled_root() -> Traversable:
    return files("atelier.benchmarks.sample")


@lru_cache(maxsize=1)
def load_suite() -> SampleSuite:
    """The bundled suite, parsed once per process."""
    return read_suite(bundled_root())


# --------------------------------------------------------------------------- judge / tool accessors


def sample_pages() -> list[SamplePage]:
    """The page corpus, in file order (what the sandbox web serves)."""
    return list(load_suite().pages.values())


def context_traits(user_id: str) -> dict[str, str]:
    """For reversibility checks: each history item id of a user and the persona trait path it reflects."""
    suite = load_suite()
    if user_id not in suite.personas:
        raise KeyError(f"no sample user {user_id!r}")
    return {item.id: item.trait for item in suite.contexts.get(user_id, ())}


# --------------------------------------------------------------------------- benchmark


def _subset(cases: list[Case], limit: int | None, seed: int) -> list[Case]:
    """`limit` cases drawn with `seed`, kept in suite order; the same seed gives the same subset."""
    if limit is None or limit >= len(cases):
        return cases
    if limit < 0:
        raise ConfigError(f"limit must be zero or positive, got {limit}")
    chosen = sorted(random.Random(seed).sample(range(len(cases)), limit))
    return [cases[i] for i in chosen]


def _load(request: LoadRequest) -> list[Case]:
    suite = load_suite()
    queries = [q for q in suite.queries if request.split == "all" or suite.split_of(q) == request.split]
    return _subset([suite.case(q, request.setting) for q in queries], request.limit, request.seed)


SPEC = register_benchmark(
    BenchmarkSpec(
        name=BENCHMARK,
        description=(
            "Bundled sample suite: PDR-style personas, research tasks and implicit history, "
            "BESPOKE/LaMP-QA-style gold per (task, user), and a small offline web corpus"
        ),
        splits=SPLITS,
        settings=SETTINGS,
        load=_load,
        default_split="all",
        default_setting="context",
    )
)
