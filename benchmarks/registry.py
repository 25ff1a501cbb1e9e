"""Benchmarks by name: each loader registers itself with its splits, settings and typed options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.named_registry import NamedRegistry


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
    ),
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
) -> list[Case]:
    """Load a benchmark's cases. Raises ValueError with the valid choices for a bad split/setting,
    and DataError when the data yields no case at all (there would be nothing to run)."""
    spec = get_benchmark(name)
    split = split or spec.split_default
    setting = setting or spec.setting_default
    if split not in spec.splits:
        raise ValueError(f"benchmark {name!r} has no split {split!r}; valid: {', '.join(spec.splits)}")
    if setting not in spec.settings:
        raise ValueError(f"benchmark {name!r} has no setting {setting!r}; valid: {', '.join(spec.settings)}")
    opts = options if isinstance(options, BaseModel) else spec.options.model_validate(options or {})
    cases = spec.load(LoadRequest(split=split, setting=setting, limit=limit, options=opts, seed=seed))
    if not cases and limit != 0:  # limit 0 asks for no case
        raise DataError(
            f"benchmark {name!r} has no cases for split {split!r}, setting {setting!r}: nothing to run "
            f"(`atelier data check {name}` checks its data files)"
        )
    return cases
