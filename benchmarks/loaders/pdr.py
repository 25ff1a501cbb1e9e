"""PDR-Bench (Personalized Deep Research Bench): 50 tasks x 25 personas = 250 queries, en and zh.

Settings follow the paper (section 5.3): `task_only` (the system gets the task alone), `context`
(the task plus the user's implicit context: memory snippets and dialogues), `persona` (the task
plus the explicit structured persona, the paper's main setting) and `persona+context`.
`Case.persona` always holds the structured persona, since the PQR judges need it whatever the
system saw; `Case.view()` decides what the system sees.

The query text is the task itself: upstream's `query` field embeds the persona JSON, which would
leak the persona into every setting.

Splits: `all` (the 250 queries) and `subset150`, the paper's reduced protocol of 3 personas per task
(appendix B.2). The paper's own choice of "representative" personas is not in our data, so the
subset here is deterministic and seed-independent: per task, the 3 users with the smallest
sha256 of `pdr150:<taskid>:<userid>`.

The dynamic contexts are not in ../shared/data. The `context` settings read them from the option
`contexts_file`: JSON Lines (optionally gzipped), one record per user, in the schema of
`ContextRecord` below (see tests/fixtures/pdr_contexts/). Upstream publishes `contexts_{en,zh}.jsonl`
(Hugging Face PersonalAILab/PersonalizedDeepResearchBench, `context_data/`), but its exact field
names could not be confirmed offline; `ContextRecord` is the one place to adapt if they differ.
`atelier simulate history --benchmark pdr` synthesizes such a file from the personas, following the
paper's annotation protocol (appendix H); its items also name the persona facet each reflects
(`trait`, kept in `Case.history_traits`, never shown to systems) and may include BESPOKE-style
search sessions (`searches`).

The option `users` keeps only the queries of the listed users (e.g. the users a contexts file
covers); a user not in the personas file is a configuration error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from atelier.benchmarks.case import (
    Case,
    ChatMessage,
    ChatSession,
    MemorySnippet,
    Persona,
    Query,
    SearchQueryRecord,
    SearchResultClick,
    SearchSession,
    persona_facets,
)
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import (
    RawRecord,
    deterministic_subset,
    existing_path,
    index_unique,
    read_jsonl,
    validation_error,
)
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "pdr"
LANGUAGES = ("en", "zh")
SETTINGS = ("persona", "task_only", "context", "persona+context")
CONTEXT_SETTINGS = ("context", "persona+context")
SUBSET_PERSONAS_PER_TASK = 3


def tasks_relpath(language: str) -> str:
    return f"pdr_bench/tasks_{language}.jsonl.gz"


def personas_relpath(language: str) -> str:
    return f"pdr_bench/personas_{language}.jsonl.gz"


def queries_relpath(language: str) -> str:
    return f"pdr_bench/queries250_{language}.jsonl.gz"


# --------------------------------------------------------------------------- raw records


class TaskRecord(RawRecord):
    taskid: int
    domain: str = Field(min_length=1)
    language: Literal["en", "zh"]
    task: str = Field(min_length=1)


class QueryRecord(RawRecord):
    id: int
    domain: str = Field(min_length=1)
    language: Literal["en", "zh"]
    taskid: int
    userid: str = Field(min_length=1)
    task: str = Field(min_length=1)


class PersonaRecord(BaseModel):
    """A structured persona: `userid` plus nested sections of facets (PDR persona schema)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    userid: str = Field(min_length=1)

    @model_validator(mode="after")
    def _has_sections(self) -> PersonaRecord:
        sections = self.model_extra or {}
        if not sections:
            raise ValueError("a persona needs at least one attribute section besides 'userid'")
        for key, value in sections.items():
            if not isinstance(value, dict):
                raise ValueError(f"persona section {key!r} must be an object, not {type(value).__name__}")
        return self

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ContextMessage(RawRecord):
    role: Literal["user", "assistant", "system"]
    content: str


class _ContextItem(RawRecord):
    id: str | None = None
    time: str | None = None
    trait: str | None = Field(default=None, description="The persona facet path the item reflects, if recorded.")


class ContextMemory(_ContextItem):
    title: str = ""
    content: str = Field(min_length=1)


class ContextDialogue(_ContextItem):
    title: str = ""
    messages: list[ContextMessage] = Field(min_length=1)


class ContextClick(RawRecord):
    title: str = Field(min_length=1)
    url: str | None = None
    snippet: str | None = None


class ContextQuery(RawRecord):
    query: str = Field(min_length=1)
    clicked: list[ContextClick] = Field(default_factory=list)


class ContextSearch(_ContextItem):
    """A BESPOKE-style web-search session (synthesized histories may include them)."""

    queries: list[ContextQuery] = Field(min_length=1)


class ContextRecord(RawRecord):
    """One user's dynamic context: memory snippets and assistant dialogues (annotator-simulated),
    optionally search sessions."""

    userid: str = Field(min_length=1)
    memories: list[ContextMemory] = Field(default_factory=list)
    dialogues: list[ContextDialogue] = Field(default_factory=list)
    searches: list[ContextSearch] = Field(default_factory=list)


# --------------------------------------------------------------------------- options


class PdrOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: Literal["en", "zh"] = "en"
    contexts_file: Path | None = Field(
        default=None,
        description="JSON Lines of per-user contexts (memory snippets + dialogues) for the context settings.",
    )
    users: list[str] | None = Field(
        default=None, min_length=1, description="Only the queries of these users (e.g. those a contexts file covers)."
    )


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class PdrData:
    """The parsed files of one language, checked against each other."""

    tasks: dict[int, TaskRecord]
    personas: dict[str, PersonaRecord]
    queries: list[QueryRecord]


def read_language(language: str) -> PdrData:
    tasks_path = resolve(tasks_relpath(language))
    personas_path = resolve(personas_relpath(language))
    queries_path = resolve(queries_relpath(language))
    tasks = index_unique(read_jsonl(tasks_path, TaskRecord), lambda t: t.taskid, file=tasks_path, field="taskid")
    personas = index_unique(
        read_jsonl(personas_path, PersonaRecord), lambda p: p.userid, file=personas_path, field="userid"
    )
    queries = read_jsonl(queries_path, QueryRecord)
    index_unique(queries, lambda q: q.id, file=queries_path, field="id")
    index_unique(queries, lambda q: (q.taskid, q.userid), file=queries_path, field="(taskid, userid)")
    for query in queries:
        if query.taskid not in tasks:
            raise DataError(
                f"task {query.taskid} is not in {tasks_path.name}", file=queries_path, field=f"query {query.id}: taskid"
            )
        if query.userid not in personas:
            raise DataError(
                f"user {query.userid!r} is not in {personas_path.name}",
                file=queries_path,
                field=f"query {query.id}: userid",
            )
        if query.language != language:
            raise DataError(
                f"language {query.language!r} in the {language} file",
                file=queries_path,
                field=f"query {query.id}: language",
            )
    return PdrData(tasks=tasks, personas=personas, queries=queries)


def count_tasks(path: Path) -> dict[str, int]:
    return {"tasks": len(read_jsonl(path, TaskRecord))}


def count_personas(path: Path) -> dict[str, int]:
    return {"personas": len(read_jsonl(path, PersonaRecord))}


def count_queries(path: Path) -> dict[str, int]:
    return {"queries": len(read_jsonl(path, QueryRecord))}


def read_contexts(path: Path) -> dict[str, ContextRecord]:
    records = read_jsonl(existing_path(path, "contexts_file"), ContextRecord)
    return index_unique(records, lambda r: r.userid, file=path, field="userid")


def check_traits(record: ContextRecord, persona: PersonaRecord, path: Path) -> None:
    """Every `trait` an item records must be a facet path of the user's persona."""
    facets = {facet for facet, _ in persona_facets(persona.attributes)}
    for kind in ("memories", "dialogues", "searches"):
        for i, item in enumerate(getattr(record, kind)):
            if item.trait is not None and item.trait not in facets:
                raise DataError(
                    f"trait {item.trait!r} is not a facet of persona {record.userid!r}",
                    file=path,
                    field=f"{record.userid}: {kind}.{i}.trait",
                )


def context_history(record: ContextRecord) -> list[MemorySnippet | ChatSession | SearchSession]:
    """A user's context as history events: memory snippets first, then dialogues, then search
    sessions, in file order."""
    events: list[MemorySnippet | ChatSession | SearchSession] = []
    for i, memory in enumerate(record.memories):
        text = f"{memory.title}: {memory.content}" if memory.title else memory.content
        events.append(MemorySnippet(id=memory.id or f"memory-{i}", text=text, timestamp=memory.time))
    for i, dialogue in enumerate(record.dialogues):
        events.append(
            ChatSession(
                id=dialogue.id or f"dialogue-{i}",
                title=dialogue.title or None,
                timestamp=dialogue.time,
                messages=[ChatMessage(role=m.role, content=m.content) for m in dialogue.messages],
            )
        )
    for i, search in enumerate(record.searches):
        events.append(
            SearchSession(
                id=search.id or f"search-{i}",
                timestamp=search.time,
                queries=[
                    SearchQueryRecord(
                        query=q.query,
                        clicked=[SearchResultClick(title=c.title, url=c.url, snippet=c.snippet) for c in q.clicked],
                    )
                    for q in search.queries
                ],
            )
        )
    return events


def context_traits(record: ContextRecord) -> dict[str, str]:
    """Each history event id of the record (as `context_history` names it) and the facet it reflects."""
    items = [
        *((m.id or f"memory-{i}", m.trait) for i, m in enumerate(record.memories)),
        *((d.id or f"dialogue-{i}", d.trait) for i, d in enumerate(record.dialogues)),
        *((s.id or f"search-{i}", s.trait) for i, s in enumerate(record.searches)),
    ]
    return {event_id: trait for event_id, trait in items if trait}


# --------------------------------------------------------------------------- splits and cases


def subset150_rank(taskid: int, userid: str) -> str:
    return hashlib.sha256(f"pdr150:{taskid}:{userid}".encode()).hexdigest()


def subset150(queries: list[QueryRecord]) -> list[QueryRecord]:
    """3 personas per task, chosen by a fixed hash (see the module docstring); original order kept."""
    by_task: dict[int, list[QueryRecord]] = {}
    for query in queries:
        by_task.setdefault(query.taskid, []).append(query)
    keep = {
        q.id
        for group in by_task.values()
        for q in sorted(group, key=lambda q: subset150_rank(q.taskid, q.userid))[:SUBSET_PERSONAS_PER_TASK]
    }
    return [q for q in queries if q.id in keep]


def _no_contexts_error(setting: str) -> ConfigError:
    return ConfigError(
        f"pdr setting {setting!r} needs the users' dynamic contexts, which are not in the data directory "
        "(PDR-Bench publishes them separately as context_data/contexts_<language>.jsonl). Supply them with "
        "the option contexts_file=<path to a JSON Lines file with one {userid, memories, dialogues} record per user>."
    )


def build_case(
    query: QueryRecord, data: PdrData, setting: str, context: ContextRecord | None, contexts_path: Path | None
) -> Case:
    persona = data.personas[query.userid]
    try:
        return Case(
            id=f"{NAME}:{query.language}:{query.id}",
            benchmark=NAME,
            user_id=query.userid,
            persona=Persona(user_id=query.userid, attributes=persona.attributes),
            query=Query(text=query.task, language=query.language),
            setting=setting,
            task_id=str(query.taskid),
            domain=query.domain,
            history=context_history(context) if context else [],
            history_traits=context_traits(context) if context else {},
            meta={"query_id": query.id, "language": query.language},
            clusters={"persona": query.userid, "task": str(query.taskid)},
        )
    except ValidationError as exc:
        # Event ids must be unique within a user's history; only a contexts file can break that.
        raise validation_error(
            exc, file=contexts_path or Path(queries_relpath(query.language)), prefix=f"{query.userid}: "
        ) from None


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, PdrOptions)
    data = read_language(options.language)
    contexts: dict[str, ContextRecord] = {}
    if options.contexts_file is not None:
        contexts = read_contexts(options.contexts_file)
    elif request.setting in CONTEXT_SETTINGS:
        raise _no_contexts_error(request.setting)
    queries = data.queries if request.split == "all" else subset150(data.queries)
    if options.users is not None:
        unknown = [u for u in options.users if u not in data.personas]
        if unknown:
            raise ConfigError(f"pdr option users: no persona {unknown[0]!r}; valid: {', '.join(data.personas)}")
        queries = [q for q in queries if q.userid in set(options.users)]
    queries = deterministic_subset(queries, request.limit, seed=request.seed, salt=f"{NAME}:{request.split}")
    cases = []
    checked: set[str] = set()
    for query in queries:
        context: ContextRecord | None = None
        if options.contexts_file is not None:
            if query.userid not in contexts:
                raise DataError(
                    f"no context record for user {query.userid!r} (to run only the users this file covers, "
                    f"set the option users = {json.dumps(list(contexts))})",
                    file=options.contexts_file,
                    field="userid",
                )
            context = contexts[query.userid]
            if query.userid not in checked:
                check_traits(context, data.personas[query.userid], options.contexts_file)
                checked.add(query.userid)
        cases.append(build_case(query, data, request.setting, context, options.contexts_file))
    return cases


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="PDR-Bench: 250 personalized deep-research queries (50 tasks x 25 real personas), en/zh.",
        splits=("all", "subset150"),
        settings=SETTINGS,
        load=load,
        options=PdrOptions,
        default_split="all",
        default_setting="persona",
        data_files=tuple(rel(lang) for lang in LANGUAGES for rel in (tasks_relpath, personas_relpath, queries_relpath)),
    )
)
