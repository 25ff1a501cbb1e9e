"""A registry of things by name (benchmarks, memory backends, judges, pipelines, providers).

Entries register themselves when their module is imported; the registry knows which modules to
import so that listing names is complete without the caller importing every module first.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from typing import Generic, TypeVar

from atelier.benchmarks.common.errors import AtelierError

T = TypeVar("T")


class UnknownNameError(AtelierError, KeyError):
    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class NamedRegistry(Generic[T]):
    def __init__(self, kind: str, modules: Iterable[str] = ()) -> None:
        self.kind = kind
        self._modules = tuple(modules)
        self._entries: dict[str, T] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, entry: T) -> T:
        existing = self._entries.get(name)
        if existing is not None and existing is not entry:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for module in self._modules:
                try:
                    importlib.import_module(module)
                except ModuleNotFoundError as exc:
                    if exc.name != module:  # a module that exists but fails to import is a bug
                        raise

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self._entries)
        return self._entries[name]

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return sorted(self._entries.items())
