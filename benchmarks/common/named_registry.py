"""A registry of things by name (benchmarks, memory backends, judges, pipelines, providers).

Entries register themselves when their module is imported; the registry knows which modules to
import so that listing names is complete without the caller importing every module first.

A registry given an `adapt` function also takes plugins (benchmarks/common/plugins.py): a name it
does not hold that is a `module:attr` reference, or the name of an entry point in the group
`atelier.plugins`, is loaded, adapted to the registry's kind (`adapt` raises PluginKindError for
an object of another kind) and kept under that name, so everything that looks a name up — a
recipe, a run's worker process, a resumed run — finds it the same way. Installed entry points of
the registry's kind are listed with its names; a `module:attr` reference is not (loading one, in a
test or a recipe, does not change what the registry lists).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.common.plugins import (
    PluginError,
    PluginKindError,
    PluginOrigin,
    find_entry_point,
    is_reference,
    load_entry_point,
    load_reference,
    origin_of,
    plugin_entry_points,
)
from atelier.benchmarks.common.suggest import did_you_mean

T = TypeVar("T")


class UnknownNameError(AtelierError, KeyError):
    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        hint = did_you_mean(name, self.valid)
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(self.valid)}" + (f"; {hint}" if hint else ""))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class NamedRegistry(Generic[T]):
    def __init__(self, kind: str, modules: Iterable[str] = (), adapt: Callable[[Any, str], T] | None = None) -> None:
        """`adapt(obj, name)`: a loaded plugin as this registry's entry, registered as `name`; raises
        PluginKindError when `obj` is not of this kind. No `adapt`: the registry takes no plugin."""
        self.kind = kind
        self._modules = tuple(modules)
        self._entries: dict[str, T] = {}
        # `module:attr` plugins loaded by reference: found by get() but not among names(), which
        # lists what is built in or installed (a reference one test or recipe loaded is neither)
        self._references: dict[str, T] = {}
        self._loaded = False
        self._lock = threading.RLock()
        self._adapt = adapt
        self._origins: dict[str, PluginOrigin] = {}
        self._scanned = False
        self.broken: dict[str, str] = {}  # installed entry points that failed to load: name -> why

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
        self._scan_entry_points()
        return sorted(self._entries)

    def known(self) -> list[str]:
        """The listed names and the `module:attr` plugins loaded by reference so far: what a recipe
        validated now may name (its references are loaded before it is validated)."""
        return sorted({*self.names(), *self._references})

    def get(self, name: str) -> T:
        self._load()
        if name in self._references:
            return self._references[name]
        if name not in self._entries:
            plugin = self._plugin(name)
            if plugin is None:
                self._scan_entry_points()
                raise UnknownNameError(self.kind, name, self._entries)
            return plugin
        return self._entries[name]

    def items(self) -> list[tuple[str, T]]:
        self._load()
        self._scan_entry_points()
        return sorted(self._entries.items())

    def loaded(self) -> dict[str, T]:
        """What is registered now (plugins loaded by reference included), loading nothing more."""
        return {**self._entries, **self._references}

    def origin(self, name: str) -> PluginOrigin | None:
        """Where a plugin entry came from; None for a built-in one."""
        return self._origins.get(name)

    # ------------------------------------------------------------------ plugins

    def _plugin(self, name: str) -> T | None:
        """The plugin `name` refers to, loaded, adapted and registered; None when it names none.
        A reference or entry point that cannot be loaded, or is of another kind, is a PluginError."""
        if self._adapt is None:
            return None
        if is_reference(name):
            value, origin = load_reference(name), origin_of(name)
        else:
            entry = find_entry_point(name)
            if entry is None:
                return None
            value, origin = load_entry_point(entry), origin_of(name, entry)
        try:
            adapted = self._adapt(value, name)
        except PluginKindError as exc:
            raise PluginKindError(f"{origin.describe()} is not a {self.kind}: {exc}") from None
        with self._lock:
            held = self._references if is_reference(name) else self._entries
            if name not in held:
                held[name] = adapted
                self._origins[name] = origin
            return held[name]

    def _scan_entry_points(self) -> None:
        """Register the installed entry points of this registry's kind (once per process); one that
        fails to load is kept in `broken` with the reason, for listings to show."""
        if self._adapt is None or self._scanned:
            return
        with self._lock:
            if self._scanned:
                return
            self._scanned = True
            for entry in plugin_entry_points():
                if entry.name in self._entries:
                    continue
                try:
                    value = load_entry_point(entry)
                    adapted = self._adapt(value, entry.name)
                except PluginKindError:
                    continue  # a plugin of another kind
                except PluginError as exc:
                    self.broken[entry.name] = str(exc)
                    continue
                self.register(entry.name, adapted)
                self._origins[entry.name] = origin_of(entry.name, entry)
