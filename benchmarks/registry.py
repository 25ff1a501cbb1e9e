"""Benchmarks by name: each loader registers itself with its splits, settings and typed options.

A researcher's own data comes by reference (`[benchmark] name = "mylab.data:load"`) or entry point
(benchmarks/common/plugins.py) — a `BenchmarkSpec`, or a loader function of one argument, the
`LoadRequest` — or as a JSON Lines file of cases (`[benchmark] path = "cases.jsonl"`, the `jsonl`
benchmark: benchmarks/loaders/cases_file.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.plugins import PluginKindError
from atelier.benchmarks.contract import check_cases, with_setting

# what Case.view understands for any case (PDR-Bench's settings); a loader function may set its own
PDR_SETTINGS = ("context", "task_only", "persona", "persona+context")


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class LoadRequest:
    split: str
    setting: str
    limit: int | None
    options: BaseModel
    seed: int = 0


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    description: str
    splits: tuple[str, ...]
    settings: tuple[str, ...]
    load: Callable[[LoadRequest], list[Case]]
    options: type[BaseModel] = NoOptions
    default_split: str | None = None
    default_setting: str | None = None
    data_files: tuple[str, ...] = field(default=())  # names in the data registry it reads

    @property
    def split_default(self) -> str:
        return self.default_split or self.splits[0]

    @property
    def setting_default(self) -> str:
        return self.default_setting or self.settings[0]


def checked_cases(name: str, produced: Iterable[Any], limit: int | None, where: str) -> list[Case]:
    """What a loader produced as cases of benchmark `name`: each a `Case` or its dict (validated;
    the first bad one is a DataError naming `where`, the item and the field), its `benchmark` set
    to `name` (so every later lookup of the case finds it), at most `limit`, ids unique."""
    cases: list[Case] = []
    seen: set[str] = set()
    for index, item in enumerate(produced):
        if limit is not None and len(cases) >= limit:
            break
        try:
            case = item if isinstance(item, Case) else Case.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"]) or "(case)"
            raise DataError(f"{where}: case {index}: {key}: {first['msg']}") from None
        if case.id in seen:
            raise DataError(f"{where}: case {index}: id {case.id!r} is repeated; case ids must be unique")
        seen.add(case.id)
        cases.append(case if case.benchmark == name else case.model_copy(update={"benchmark": name}))
    return cases


def plugin_benchmark(value: Any, name: str) -> BenchmarkSpec:
    """A plugin as the benchmark registered as `name`: a `BenchmarkSpec` (its name replaced), or a
    loader function `load(request: LoadRequest)` returning cases (`Case`s or their dicts); its
    attributes `splits`, `settings` and `options` (a pydantic model), when set, say what it takes."""
    if isinstance(value, BenchmarkSpec):
        return replace(value, name=name, load=_checked_loader(value.load, name))
    if inspect.isclass(value) or not callable(value):
        kind = "class" if inspect.isclass(value) else type(value).__name__
        raise PluginKindError(
            "a benchmark is a loader function of one argument (the LoadRequest) returning cases, or a "
            f"BenchmarkSpec; this is a {kind} {getattr(value, '__qualname__', repr(value)[:60])}"
        )
    try:
        parameters = [
            p for p in inspect.signature(value).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        parameters = []
    required = [p for p in parameters if p.default is p.empty]
    if len(required) != 1:
        raise PluginKindError(
            f"a benchmark loader takes one argument (the LoadRequest); {getattr(value, '__qualname__', value)} "
            f"takes {len(required)} required"
        )
    doc = (inspect.getdoc(value) or "").strip().split("\n")[0]
    splits = tuple(getattr(value, "splits", ("all",)))
    settings = tuple(getattr(value, "settings", PDR_SETTINGS))
    options = getattr(value, "options", NoOptions)
    if not splits or not settings or not (inspect.isclass(options) and issubclass(options, BaseModel)):
        raise PluginKindError(
            f"{value.__qualname__}: `splits` and `settings` must be non-empty, `options` a pydantic model"
        )
    return BenchmarkSpec(
        name=name,
        description=doc or f"loader {name}",
        splits=splits,
        settings=settings,
        load=_checked_loader(value, name),
        options=options,
        default_setting="context" if "context" in settings else None,
    )


def _checked_loader(load: Callable[[LoadRequest], Any], name: str) -> Callable[[LoadRequest], list[Case]]:
    def checked(request: LoadRequest) -> list[Case]:
        return checked_cases(name, load(request) or [], request.limit, f"benchmark {name!r}")

    return checked


BENCHMARKS: NamedRegistry[BenchmarkSpec] = NamedRegistry(
    "benchmark",
    modules=(
        "atelier.benchmarks.loaders.sample",
        "atelier.benchmarks.loaders.pdr",
        "atelier.benchmarks.loaders.ikat",
        "atelier.benchmarks.loaders.locomo",
        "atelier.benchmarks.loaders.prefeval",
        "atelier.benchmarks.loaders.lampqa",
        "atelier.benchmarks.loaders.bespoke",
        "atelier.benchmarks.loaders.drb",
        "atelier.benchmarks.loaders.cases_file",
    ),
    adapt=plugin_benchmark,
)


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    return BENCHMARKS.register(spec.name, spec)


def benchmark_names() -> list[str]:
    return BENCHMARKS.names()


def get_benchmark(name: str) -> BenchmarkSpec:
    return BENCHMARKS.get(name)


def load_cases(
    name: str,
    split: str | None = None,
    setting: str | None = None,
    limit: int | None = None,
    options: dict | BaseModel | None = None,
    seed: int = 0,
    *,
    checked: bool = True,
) -> list[Case]:
    """Load a benchmark's cases, each with `setting` as its setting (benchmarks/contract.py: whatever
    the loader wrote), held to the benchmark contract (`checked`; `atelier check benchmark` reports
    its clauses one by one instead). Raises ValueError with the valid choices for a bad
    split/setting, and DataError when the data yields no case at all (there would be nothing to run)
    or breaks the contract (an event id naming two events of one user, a persona setting on cases
    without one)."""
    spec = get_benchmark(name)
    split = split or spec.split_default
    setting = setting or spec.setting_default
    if split not in spec.splits:
        raise ValueError(f"benchmark {name!r} has no split {split!r}; valid: {', '.join(spec.splits)}")
    if setting not in spec.settings:
        raise ValueError(f"benchmark {name!r} has no setting {setting!r}; valid: {', '.join(spec.settings)}")
    opts = options if isinstance(options, BaseModel) else spec.options.model_validate(options or {})
    # the setting asked for is every case's, whatever the loader wrote: the one place it is applied
    cases = with_setting(
        spec.load(LoadRequest(split=split, setting=setting, limit=limit, options=opts, seed=seed)), setting
    )
    if checked:
        source = getattr(opts, "path", None)
        check_cases(
            cases,
            [setting],
            f"benchmark {name!r}" + (f" ({source})" if source else "") + f", split {split}, setting {setting}",
        )
    if not cases and limit != 0:  # limit 0 asks for no case
        raise DataError(
            f"benchmark {name!r} has no cases for split {split!r}, setting {setting!r}: nothing to run "
            f"(`atelier data check {name}` checks its data files)"
        )
    return cases
