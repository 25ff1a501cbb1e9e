"""Benchmarks by name: each loader registers itself with its splits, settings and typed options."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel, ConfigDict

from benchmarks.case import Case


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


_REGISTRY: dict[str, BenchmarkSpec] = {}

# Modules that register loaders when imported. Kept here so `benchmark_names()` is complete
# without the caller importing every loader first.
_LOADER_MODULES = (
    "benchmarks.loaders.sample",
    "benchmarks.loaders.pdr",
    "benchmarks.loaders.ikat",
    "benchmarks.loaders.locomo",
    "benchmarks.loaders.prefeval",
    "benchmarks.loaders.lampqa",
    "benchmarks.loaders.bespoke",
    "benchmarks.loaders.drb",
)
_loaded = False


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"benchmark {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for module in _LOADER_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a loader that exists but fails to import is a bug: surface it
                raise
    _loaded = True


def benchmark_names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_benchmark(name: str) -> BenchmarkSpec:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; valid: {', '.join(sorted(_REGISTRY))}") from None


def load_cases(
    name: str,
    split: str | None = None,
    setting: str | None = None,
    limit: int | None = None,
    options: dict | BaseModel | None = None,
    seed: int = 0,
) -> list[Case]:
    """Load a benchmark's cases. Raises ValueError with the valid choices for a bad split/setting."""
    spec = get_benchmark(name)
    split = split or spec.split_default
    setting = setting or spec.setting_default
    if split not in spec.splits:
        raise ValueError(f"benchmark {name!r} has no split {split!r}; valid: {', '.join(spec.splits)}")
    if setting not in spec.settings:
        raise ValueError(f"benchmark {name!r} has no setting {setting!r}; valid: {', '.join(spec.settings)}")
    opts = options if isinstance(options, BaseModel) else spec.options.model_validate(options or {})
    return spec.load(LoadRequest(split=split, setting=setting, limit=limit, options=opts, seed=seed))
