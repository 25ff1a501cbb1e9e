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
from importlib.metadata import EntryPoint
from typing import Any, Generic, TypeVar

from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.common.plugins import (
    PluginClashError,
    PluginError,
    PluginKindError,
    PluginOrigin,
    distribution_key,
    find_entry_points,
    is_reference,
    load_entry_point,
    load_reference,
    origin_of,
    plugin_entry_points,
    where_installed,
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
        self._builtins_checked: set[str] = set()  # built-in names no installed entry point of this kind claims
        self._installed_names: frozenset[str] | None = None
        self.broken: dict[str, str] = {}  # installed entry points that failed to load or clash: name -> why

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
        if name not in self._origins:  # a built-in: refused if an installed plugin claims its name too
            self._refuse_builtin_clash(name)
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
            try:
                adapted = self._adapt(value, name)
            except PluginKindError as exc:
                raise PluginKindError(f"{origin.describe()} is not a {self.kind}: {exc}") from None
        else:
            entries = find_entry_points(name)
            if not entries:
                return None
            found = self._of_this_kind(name, entries)
            if len(entries) == 1 and not found:  # one entry point, of another kind: say what it is not
                value, origin = load_entry_point(entries[0]), origin_of(name, entries[0])
                try:
                    self._adapt(value, name)
                except PluginKindError as exc:
                    raise PluginKindError(f"{origin.describe()} is not a {self.kind}: {exc}") from None
            if not found:
                return None
            adapted, origin = found[0]
        with self._lock:
            held = self._references if is_reference(name) else self._entries
            if name not in held:
                held[name] = adapted
                self._origins[name] = origin
            return held[name]

    def _of_this_kind(self, name: str, entries: list[EntryPoint]) -> list[tuple[T, PluginOrigin]]:
        """The entry points named `name` that are of this registry's kind, loaded and adapted. Two
        of them (two distributions claiming one name) are refused naming both: which one a recipe
        meant cannot be told. One that fails to load is a PluginError naming it."""
        found = []
        declaring = []
        for entry in entries:
            value = load_entry_point(entry)
            try:
                found.append((self._adapt(value, name), origin_of(name, entry)))  # type: ignore[misc]
            except PluginKindError:
                continue  # a plugin of another kind
            declaring.append(entry)
        if len(found) > 1 and len({distribution_key(entry) for entry in declaring}) == 1:
            raise PluginClashError(self._one_distribution_twice(name, declaring))
        if len(found) > 1:
            both = " and ".join(origin.describe() for _, origin in found)
            raise PluginClashError(
                f"{self.kind} {name!r} is declared by two installed distributions: {both}; uninstall one, or rename "
                f"its entry point (a recipe may also name the one it means by reference: {found[0][1].target})"
            )
        return found

    def _one_distribution_twice(self, name: str, entries: list[EntryPoint]) -> str:
        """Why entry points of one distribution claiming `name` are refused: the distribution is
        installed twice (two sys.path folders), its copies differing in version or target (copies
        that do not differ count once: find_entry_points), or it declares the name twice."""
        dist = entries[0].dist.name if entries[0].dist is not None else "?"
        copies = "; ".join(f"{where_installed(entry)}: {entry.value}" for entry in entries)
        if len({where_installed(entry) for entry in entries}) < len(entries):
            return f"{self.kind} {name!r} is declared twice by the distribution {dist} ({copies}); keep one of them"
        return (
            f"{self.kind} {name!r}: the distribution {dist} is installed twice, its copies declaring it differently "
            f"({copies}); remove the copy not meant (pip uninstall it, or take its folder off sys.path/PYTHONPATH)"
        )

    def _refuse_builtin_clash(self, name: str) -> None:
        """A PluginClashError when an installed entry point of this kind is named like the built-in
        `name` (it would be silently ignored, or silently replace it): its name must change."""
        if self._adapt is None or name in self._builtins_checked:
            return
        if self._installed_names is None:  # read once per registry: the group's names (nothing imported)
            self._installed_names = frozenset(entry.name for entry in plugin_entry_points())
        entries = find_entry_points(name) if name in self._installed_names else []
        try:
            found = self._of_this_kind(name, entries) if entries else []
        except PluginClashError:
            raise
        except PluginError as exc:  # its kind cannot be told: it may be meant to replace the built-in
            raise PluginClashError(
                f"{self.kind} {name!r} is built into Atelier, and an installed entry point of that name cannot be "
                f"loaded to tell what it is: {exc}; fix or uninstall it, or rename it"
            ) from None
        if found:
            raise PluginClashError(
                f"{self.kind} {name!r} is built into Atelier, and {found[0][1].describe()} claims the same name; "
                'rename the entry point (its distribution\'s pyproject.toml, [project.entry-points."atelier.plugins"])'
            )
        self._builtins_checked.add(name)

    def _scan_entry_points(self) -> None:
        """Register the installed entry points of this registry's kind (once per process); one that
        fails to load, or whose name clashes (two distributions, or a built-in name), is kept in
        `broken` with the reason, for listings to show."""
        if self._adapt is None or self._scanned:
            return
        with self._lock:
            if self._scanned:
                return
            self._scanned = True
            names = dict.fromkeys(entry.name for entry in plugin_entry_points())
            for name in names:
                if name in self._entries and name in self._origins:  # loaded by name already
                    continue
                try:
                    if name in self._entries:
                        self._refuse_builtin_clash(name)
                        continue
                    found = self._of_this_kind(name, find_entry_points(name))
                except PluginError as exc:
                    self.broken[name] = str(exc)
                    continue
                if found:
                    adapted, origin = found[0]
                    self.register(name, adapted)
                    self._origins[name] = origin
