"""BESPOKE: personalization of search-augmented LLMs, from 30 annotators' own chat and search histories.

The release (Hugging Face yonsei-dli/BESPOKE) is a set of tables, each keyed by `user` and, for
per-query tables, `query-id`:
  queries/query_table             user, query-id, query, gold_information_need
  gold_information/gold_information        user, query-id, id, gold_information_value
  personalized_rubric/personalized_rubric  user, query-id, id, personalized_rubric_value
  evaluation_shot/evaluation_shot          user, query-id, id, evaluation_shot_value  (R-J pairs)
  chat_history/chat_history                user, id, chat_history_value
  search_history/search_history            user, id, search_history_value
The data is not in ../shared/data: the option `data_dir` points at a download in that layout, each
table as `<table>.jsonl` (JSON Lines, e.g. exported with `datasets`) or `<table>.parquet` (read
with pyarrow when it is installed).

The `*_value` columns are JSON (or plain text) whose inner layout the dataset card does not spell
out; this loader reads them as: gold information and rubric values = one text each (or a JSON list
of texts); an evaluation shot = `{response, score, feedback, criterion?}`; a chat session =
`{title?, timestamp?, messages: [{role, content}]}`; a search session = `{timestamp?, queries:
[{query, clicked: [{title, url?, snippet?}]}]}`. The value models below are the place to adapt.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from atelier.benchmarks.case import (
    Case,
    ChatMessage,
    ChatSession,
    Gold,
    Query,
    RJPair,
    RubricAspect,
    SearchQueryRecord,
    SearchResultClick,
    SearchSession,
)
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.loaders._records import (
    RawRecord,
    deterministic_subset,
    existing_path,
    index_unique,
    read_jsonl,
    validate,
)
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "bespoke"
TABLES = {
    "queries": "queries/query_table",
    "gold_information": "gold_information/gold_information",
    "personalized_rubric": "personalized_rubric/personalized_rubric",
    "evaluation_shot": "evaluation_shot/evaluation_shot",
    "chat_history": "chat_history/chat_history",
    "search_history": "search_history/search_history",
}
RowT = TypeVar("RowT", bound=BaseModel)


# --------------------------------------------------------------------------- table rows


class QueryRow(RawRecord):
    user: str = Field(min_length=1)
    query_id: str = Field(alias="query-id", min_length=1)
    query: str = Field(min_length=1)
    gold_information_need: str = ""


class _QueryItemRow(RawRecord):
    user: str = Field(min_length=1)
    query_id: str = Field(alias="query-id", min_length=1)
    id: str = Field(min_length=1)


class GoldInformationRow(_QueryItemRow):
    gold_information_value: str


class RubricRow(_QueryItemRow):
    personalized_rubric_value: str


class ShotRow(_QueryItemRow):
    evaluation_shot_value: str


class ChatRow(RawRecord):
    user: str = Field(min_length=1)
    id: str = Field(min_length=1)
    chat_history_value: str


class SearchRow(RawRecord):
    user: str = Field(min_length=1)
    id: str = Field(min_length=1)
    search_history_value: str


# --------------------------------------------------------------------------- JSON inside values


class ShotValue(RawRecord):
    response: str = Field(min_length=1)
    score: float | None = None
    feedback: str = ""
    criterion: str | None = None


class ChatValue(RawRecord):
    title: str | None = None
    timestamp: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)


class ClickValue(RawRecord):
    title: str
    url: str | None = None
    snippet: str | None = None


class SearchQueryValue(RawRecord):
    query: str = Field(min_length=1)
    clicked: list[ClickValue] = Field(default_factory=list)


class SearchValue(RawRecord):
    timestamp: str | None = None
    queries: list[SearchQueryValue] = Field(min_length=1)


def _value_json(text: str, *, file: Path, line: int, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON inside the value: {exc.msg}", file=file, line=line, field=field) from None
    except RecursionError:
        raise DataError("invalid JSON inside the value: nested too deeply", file=file, line=line, field=field) from None


def parse_value(model: type[RowT], text: str, *, file: Path, line: int, field: str) -> RowT:
    return validate(
        model, _value_json(text, file=file, line=line, field=field), file=file, line=line, prefix=f"{field}."
    )


def value_texts(text: str) -> list[str]:
    """A plain-text value, or a JSON list of texts."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError):
            return [text]
        if isinstance(data, list) and all(isinstance(x, str) for x in data):
            return data
    return [text]


# --------------------------------------------------------------------------- reading tables


def table_path(data_dir: Path, table: str) -> Path:
    stem = data_dir / TABLES[table]
    for candidate in (stem.with_suffix(".jsonl"), stem.with_suffix(".parquet")):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"bespoke table {table!r} not found: expected {stem}.jsonl or {stem}.parquet")


def read_table(data_dir: Path, table: str, model: type[RowT]) -> tuple[Path, list[RowT]]:
    path = table_path(data_dir, table)
    if path.suffix == ".jsonl":
        return path, read_jsonl(path, model)
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise ConfigError(
            f"reading {path} needs pyarrow (pip install pyarrow), or convert the table to JSON Lines"
        ) from None
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"unreadable parquet: {exc}", file=path) from None
    return path, [validate(model, row, file=path, line=i + 1) for i, row in enumerate(rows)]


class BespokeTables(BaseModel):
    model_config = ConfigDict(frozen=True)
    queries: list[QueryRow]
    claims: dict[str, list[str]]
    rubric: dict[str, list[RubricAspect]]
    shots: dict[str, list[RJPair]]
    history: dict[str, list[ChatSession | SearchSession]]


def read_tables(data_dir: Path) -> BespokeTables:
    queries_path, queries = read_table(data_dir, "queries", QueryRow)
    known = index_unique(queries, lambda q: q.query_id, file=queries_path, field="query-id")

    def per_query(table: str, model: type[_QueryItemRow]) -> tuple[Path, list[tuple[int, Any]]]:
        path, rows = read_table(data_dir, table, model)
        for line, row in enumerate(rows, start=1):
            if row.query_id not in known:
                raise DataError(
                    f"query {row.query_id!r} is not in the query table", file=path, line=line, field="query-id"
                )
        return path, list(enumerate(rows, start=1))

    claims: dict[str, list[str]] = defaultdict(list)
    _, gold_rows = per_query("gold_information", GoldInformationRow)
    for _, row in gold_rows:
        claims[row.query_id] += value_texts(row.gold_information_value)
    rubric: dict[str, list[RubricAspect]] = defaultdict(list)
    _, rubric_rows = per_query("personalized_rubric", RubricRow)
    for _, row in rubric_rows:
        rubric[row.query_id] += [RubricAspect(aspect=t) for t in value_texts(row.personalized_rubric_value)]
    shots: dict[str, list[RJPair]] = defaultdict(list)
    shots_path, shot_rows = per_query("evaluation_shot", ShotRow)
    for line, row in shot_rows:
        shot = parse_value(
            ShotValue, row.evaluation_shot_value, file=shots_path, line=line, field="evaluation_shot_value"
        )
        shots[row.query_id].append(
            RJPair(response=shot.response, score=shot.score, feedback=shot.feedback, criterion=shot.criterion)
        )

    history: dict[str, list[ChatSession | SearchSession]] = defaultdict(list)
    chat_path, chats = read_table(data_dir, "chat_history", ChatRow)
    for line, row in enumerate(chats, start=1):
        chat = parse_value(ChatValue, row.chat_history_value, file=chat_path, line=line, field="chat_history_value")
        history[row.user].append(
            ChatSession(id=f"chat:{row.id}", title=chat.title, timestamp=chat.timestamp, messages=chat.messages)
        )
    search_path, searches = read_table(data_dir, "search_history", SearchRow)
    for line, row in enumerate(searches, start=1):
        search = parse_value(
            SearchValue, row.search_history_value, file=search_path, line=line, field="search_history_value"
        )
        history[row.user].append(
            SearchSession(
                id=f"search:{row.id}",
                timestamp=search.timestamp,
                queries=[
                    SearchQueryRecord(
                        query=q.query,
                        clicked=[SearchResultClick(title=c.title, url=c.url, snippet=c.snippet) for c in q.clicked],
                    )
                    for q in search.queries
                ],
            )
        )
    for user, events in history.items():
        index_unique(events, lambda e: e.id, file=data_dir, field=f"history id of user {user}")
    return BespokeTables(queries=queries, claims=claims, rubric=rubric, shots=shots, history=history)


def count_tables(data_dir: Path) -> dict[str, int]:
    tables = read_tables(data_dir)
    return {
        "queries": len(tables.queries),
        "users": len({q.user for q in tables.queries}),
        "history sessions": sum(len(v) for v in tables.history.values()),
    }


# --------------------------------------------------------------------------- cases


class BespokeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data_dir: Path | None = Field(default=None, description="A BESPOKE download in the release's table layout.")


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, BespokeOptions)
    if options.data_dir is None:
        raise ConfigError(
            "bespoke data is not in the data directory; download yonsei-dli/BESPOKE and pass the option "
            "data_dir=<its folder, with queries/query_table.jsonl|parquet and the other tables>"
        )
    tables = read_tables(existing_path(options.data_dir, "data_dir", directory=True))
    cases = [
        Case(
            id=f"{NAME}:{q.query_id}",
            benchmark=NAME,
            user_id=q.user,
            query=Query(text=q.query),
            setting=request.setting,
            history=tables.history.get(q.user, []),
            meta={"query_id": q.query_id},
            clusters={"user": q.user},
            gold=Gold(
                information_need=q.gold_information_need or None,
                information_claims=tables.claims.get(q.query_id, []),
                rubric_aspects=tables.rubric.get(q.query_id, []),
                rj_pairs=tables.shots.get(q.query_id, []),
            ),
        )
        for q in tables.queries
    ]
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=NAME)


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="BESPOKE: 150 queries of 30 annotators with their chat and search histories; gold needs, rubrics, R-J pairs.",
        splits=("all",),
        settings=("history", "task_only"),
        load=load,
        options=BespokeOptions,
    )
)
