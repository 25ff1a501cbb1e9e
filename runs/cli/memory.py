"""`atelier memory eval` (history-retrieval quality of a backend on a benchmark) and `atelier bench
memory` (ingest throughput, recall latency, peak RSS at scale). Both print JSON.

`--param key=value` sets a field of the backend's typed config (dotted keys reach nested tables,
e.g. `conversation.turns=3`); values are read as JSON when they parse (numbers, true/false, null,
lists), else as strings — except where the config declares a type the JSON value is not but the
text is (`--option assistant_id=35` for a `str` option stays the text "35").
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union, cast, get_args, get_origin

import typer
from pydantic import BaseModel, PydanticUserError, TypeAdapter, ValidationError

from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.runs.cli._common import machine_facts, print_json


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text


def _declared(model: type[BaseModel], path: list[str]) -> Any:
    """The type `model` declares at the dotted `path` (through nested models and dict tables);
    None where it declares none (an unknown key, a table of any values)."""
    annotation: Any = model
    for part in path:
        if get_origin(annotation) in (Union, types.UnionType):  # `Sub | None`: the table's own type
            inner = [arg for arg in get_args(annotation) if arg is not type(None)]
            annotation = inner[0] if len(inner) == 1 else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part)
            annotation = field.annotation if field is not None else None
        elif get_origin(annotation) is dict and len(get_args(annotation)) == 2:
            annotation = get_args(annotation)[1]
        else:
            return None
    return None if annotation is Any else annotation


def _fits(annotation: Any, value: Any) -> bool:
    """Whether `value` validates as `annotation` (pydantic's lax mode, as a config validates it)."""
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    except PydanticUserError:  # a type pydantic cannot check on its own (arbitrary_types_allowed): no opinion
        return True
    return True


def _typed(text: str, path: list[str], models: tuple[type[BaseModel], ...]) -> Any:
    """The value of `key=text` for the config `models` (several: each must take it): its JSON value
    when that is text or fits the key's declared type, else the text itself when that fits (a `str`
    option set to `35`, `true` or `null` stays that text). Neither fitting: the JSON value, for the
    config's validation to name the option and say what it expects."""
    value = _value(text)
    if isinstance(value, str):
        return value
    declared = [a for a in (_declared(model, path) for model in models) if a is not None]
    if not declared or all(_fits(a, value) for a in declared):
        return value
    return text if all(_fits(a, text) for a in declared) else value


def parse_assignments(items: list[str], flag: str, *models: type[BaseModel]) -> dict[str, Any]:
    """`key=value` strings -> a nested dict (dotted keys make nested tables). `models`: the typed
    configs the values are for, whose declared types decide how a value is read (`_typed`)."""
    data: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r} is not key=value")
        path = key.strip().split(".")
        *parents, leaf = path
        table = data
        for part in parents:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{flag} {key!r}: {part!r} is set to a value and used as a table")
        table[leaf] = _typed(value, path, models)
    return data


def declared(model_of: Callable[[], type[BaseModel]]) -> tuple[type[BaseModel], ...]:
    """The config model `model_of()` finds, for `parse_assignments`; none when it finds none (an
    unknown name, a plugin that does not load: the command says so where it looks the name up)."""
    try:
        return (model_of(),)
    except AtelierError:
        return ()


def _fields_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The (nested) config model that the error location points into."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    return model


def backend_config(backend: str, params: list[str]):
    """The backend's typed config from `--param` values; one ConfigError naming the bad key."""
    from atelier.memory.registry import backend_class

    model = backend_class(backend).config_model
    data = {**parse_assignments(params, "--param", model), "backend": backend}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        key = ".".join(str(p) for p in loc) or "(config)"
        fields = ", ".join(f for f in _fields_at(model, loc).model_fields if f != "backend")
        raise ConfigError(f"--param {key}: {error['msg']} (backend {backend!r} fields: {fields})") from None


def _gateway(model: str, api_base: str | None):
    from atelier.agents.models.gateway import Gateway
    from atelier.agents.models.settings import ModelSettings

    settings = ModelSettings(model=model, api_base=api_base)
    return Gateway({"system": settings, "memory": settings})


def _llm_summary(gateway) -> dict[str, Any]:
    totals = gateway.ledger.totals()
    return {**totals, "dry_run": bool(totals["calls"]) and gateway.dry_run}


def memory_eval(
    benchmark: str = typer.Option(
        ..., "--benchmark", help="Benchmark with relevant history ids (ikat, locomo, sample, ...)."
    ),
    backend: str = typer.Option(..., "--backend", help="Memory backend name."),
    split: str | None = typer.Option(None, "--split", help="Benchmark split (default: the benchmark's)."),
    setting: str | None = typer.Option(None, "--setting", help="Benchmark setting (default: the benchmark's)."),
    param: list[str] = typer.Option([], "--param", help="Backend config field, key=value (repeatable)."),
    option: list[str] = typer.Option(
        [], "--option", help="Benchmark loader option, key=value (e.g. qrels=nist for ikat)."
    ),
    query: str = typer.Option("raw", "--query", help="raw | resolved | context (see memory.base.memory_query)."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Evaluate at most N cases with gold relevant history (a seeded subset)."
    ),
    model: str = typer.Option("scripted", "--model", help="Model for LLM-using backends (litellm string or scripted)."),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --model."),
    budget: int | None = typer.Option(
        None, "--budget", min=1, help="Context budget in tokens (default: the config's)."
    ),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Recalls in flight at once."),
    per_query: Path | None = typer.Option(
        None, "--per-query", help="Also write each case's ranking and scores (JSONL)."
    ),
) -> None:
    """Score a backend's history retrieval (nDCG@3/10, P@3, R@3, MRR, recall latency) on a benchmark.

    When no case has gold relevant history nothing is measured: the figures print as null, with
    `not_measured` saying why, and the command exits 2 (bad input: pick a benchmark with gold)."""
    from atelier.benchmarks.loaders._records import deterministic_subset
    from atelier.benchmarks.registry import get_benchmark, load_cases
    from atelier.memory.base import QUERY_MODES, MemoryEnv, QueryMode
    from atelier.memory.evaluation import NOT_MEASURED, evaluate_retrieval, has_gold
    from atelier.memory.registry import create_backend

    if query not in QUERY_MODES:
        raise ConfigError(f"--query {query!r}; valid: {', '.join(QUERY_MODES)}")
    config = backend_config(backend, param)
    options = parse_assignments(option, "--option", *declared(lambda: get_benchmark(benchmark).options))
    split = split or get_benchmark(benchmark).split_default
    try:
        every = load_cases(benchmark, split=split, setting=setting, options=options)
    except ValidationError as exc:  # loader options that do not validate
        first = exc.errors()[0]
        raise ConfigError(f"--option {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    except ValueError as exc:  # a bad split or setting
        raise ConfigError(f"--benchmark {benchmark}: {str(exc).splitlines()[0]}") from None
    # the limit applies to the cases that can be scored, so `--limit 10` scores 10 when 10 exist
    judged = [case for case in every if has_gold(case)]
    if not judged:
        # Exit 2, bad input, rather than 3: this benchmark, split and options carry no gold relevant
        # history, so the command cannot measure anything on them whatever the backend does; it is
        # found before any backend is built or history ingested ("nothing was started"), and the
        # fix is another input (a benchmark with relevant history ids, or e.g. `--option qrels=...`).
        print_json(
            {
                "benchmark": benchmark,
                "split": split,
                "options": options,
                "query": query,
                "limit": limit,
                **{name: None for name in ("nDCG@3", "nDCG@10", "P@3", "R@3", "MRR")},
                "n": 0,
                "not_measured": NOT_MEASURED,
                "skipped_without_gold": len(every),
                "cases_with_gold": 0,
                "backend": config.model_dump(mode="json"),
            }
        )
        raise ConfigError(
            f"--benchmark {benchmark} (split {split}): {NOT_MEASURED} ({len(every)} cases; memory eval "
            "scores cases with Gold.relevant_history_ids or Gold.relevance)"
        )
    if not any(case.view().history for case in judged):  # e.g. task_only: nothing to rank, not a 0.0
        raise ConfigError(
            f"--setting {judged[0].setting}: its views give the memory no history on any of the {len(judged)} cases "
            "with gold, so there is no retrieval to measure; choose a setting that shows the history "
            "(e.g. context, persona+context)"
        )
    cases = deterministic_subset(judged, limit, seed=0, salt=f"memory-eval:{benchmark}:{split}")
    gateway = _gateway(model, api_base)

    async def run():
        with tempfile.TemporaryDirectory(prefix="atelier-memory-eval-") as store:
            memory = create_backend(config, MemoryEnv(gateway=gateway, store_dir=Path(store)))
            try:
                # one of QUERY_MODES: checked above
                return await evaluate_retrieval(memory, cases, cast(QueryMode, query), budget, concurrency)
            finally:
                await memory.aclose()

    evaluation = asyncio.run(run())
    if per_query is not None:
        write_atomically(per_query, "".join(r.model_dump_json() + "\n" for r in evaluation.per_query))
    print_json(
        {
            "benchmark": benchmark,
            "split": split,
            "options": options,
            "query": query,
            "limit": limit,
            **evaluation.summary(),
            "skipped_without_gold": len(every) - len(judged),  # in the whole split, before the limit
            "cases_with_gold": len(judged),
            "backend": config.model_dump(mode="json"),
            "model": model,
            "llm": _llm_summary(gateway),
        }
    )


def bench_memory(
    backend: str = typer.Option(..., "--backend", help="Memory backend name."),
    items: int = typer.Option(..., "--items", min=1, help="Synthetic history events in total."),
    queries: int = typer.Option(1000, "--queries", min=1, help="Recalls timed."),
    events_per_user: int = typer.Option(500, "--events-per-user", min=1, help="History events per synthetic user."),
    param: list[str] = typer.Option([], "--param", help="Backend config field, key=value (repeatable)."),
    model: str = typer.Option("scripted", "--model", help="Model for LLM-using backends."),
    store_dir: Path | None = typer.Option(None, "--store-dir", help="Backend store (default: a temporary directory)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic history and queries."),
) -> None:
    """Ingest N synthetic events, time recalls; print ingest items/s, recall p50/p95 ms, peak RSS MB."""
    from atelier.memory.base import MemoryEnv
    from atelier.memory.registry import create_backend
    from atelier.runs.bench.memory import peak_rss_mb, run_bench

    config = backend_config(backend, param)
    gateway = _gateway(model, None)

    async def run(store: Path):
        memory = create_backend(config, MemoryEnv(gateway=gateway, store_dir=store))
        try:
            return await run_bench(memory, items, queries, events_per_user, seed=seed)
        finally:
            await memory.aclose()

    rss_before = peak_rss_mb()
    if store_dir is not None:
        result = asyncio.run(run(store_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="atelier-bench-memory-") as store:
            result = asyncio.run(run(Path(store)))
    print_json(
        {
            "benchmark": "memory",
            **result.summary(),
            "peak_rss_mb_before_backend": round(rss_before, 1),
            "backend": config.model_dump(mode="json"),
            "llm": _llm_summary(gateway),
            "machine": machine_facts(),
        }
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    memory_app = typer.Typer(help="Memory backends: evaluate history retrieval.", no_args_is_help=True)
    memory_app.command("eval")(memory_eval)
    app.add_typer(memory_app, name="memory")
    bench_app.command("memory")(bench_memory)
