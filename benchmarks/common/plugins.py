"""Plugins: what a researcher brings from a package of their own, named in a recipe by reference.

Two ways to name a plugin:

- `module:attr` (`mylab.memory:KeywordMemory`): the module is imported from `sys.path` (a package
  installed or not, e.g. a folder on `PYTHONPATH`), its attribute is the plugin;
- a short name (`keyword`): an entry point of that name in the group `atelier.plugins`, which an
  installed distribution declares in its pyproject.toml
  (`[project.entry-points."atelier.plugins"] keyword = "mylab.memory:KeywordMemory"`).

What a plugin must be depends on where it is named (a memory backend, a pipeline, a judge, a
benchmark): each registry adapts the loaded object to its own kind, or refuses it naming what it
expected (`PluginKindError`). This module only finds and imports; it knows no kind.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Literal

from atelier.benchmarks.common.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

GROUP = "atelier.plugins"
_REFERENCE = re.compile(
    r"^(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):(?P<attr>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)$"
)


class PluginError(ConfigError):
    """A plugin that cannot be loaded: its module does not import, or lacks the attribute."""


class PluginKindError(PluginError):
    """A plugin that loaded but is not what its place in the recipe needs (a judge named as memory)."""


class PluginClashError(PluginError):
    """Two installed entry points of one kind claim one name, or one claims a built-in's name."""


@dataclass(frozen=True)
class PluginOrigin:
    """Where a registered plugin came from, as listings and a run's config show it."""

    name: str  # as the recipe names it
    target: str  # module:attr
    distribution: str | None = None  # the installed distribution declaring it (entry points only)

    def describe(self) -> str:
        if self.distribution:
            return f"plugin {self.target} (entry point {self.name!r} of {self.distribution})"
        return f"plugin {self.target}"


def is_reference(name: str) -> bool:
    """Whether `name` is a `module:attr` reference (rather than a registered or entry-point name)."""
    return bool(_REFERENCE.match(name))


def load_reference(reference: str) -> Any:
    """The object `module:attr` names; a PluginError naming the module (or the attribute) otherwise."""
    match = _REFERENCE.match(reference)
    if match is None:
        raise PluginError(f"{reference!r} is not a reference: write module:attribute, e.g. mylab.memory:KeywordMemory")
    module_name, attr = match["module"], match["attr"]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        hint = (
            " (is its package installed, or its folder on PYTHONPATH?)"
            if module_name == missing or module_name.startswith(missing + ".")
            else ""
        )
        raise PluginError(f"cannot import module {module_name!r}: no module named {missing!r}{hint}") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's own import error, whatever it is, told in one line
        raise PluginError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            public = sorted(n for n in dir(module) if not n.startswith("_"))[:12]
            raise PluginError(
                f"module {module_name!r} has no attribute {attr!r}"
                + (f" (it has: {', '.join(public)})" if public else "")
            )
        value = getattr(value, part)
    return value


def plugin_entry_points() -> list[EntryPoint]:
    """The entry points of the group `atelier.plugins` in this environment, by name."""
    return sorted(entry_points(group=GROUP), key=lambda ep: ep.name)


def find_entry_points(name: str) -> list[EntryPoint]:
    """Every installed entry point named `name` (two distributions may declare one name). One
    distribution found twice on sys.path (the same name and version, in two folders) declaring the
    same target counts once: it is one plugin, not a clash."""
    distinct: dict[tuple[str | None, str | None, str], EntryPoint] = {}
    for entry in plugin_entry_points():
        if entry.name == name:
            distinct.setdefault((distribution_key(entry), _version(entry), entry.value), entry)
    return list(distinct.values())


def distribution_key(entry: EntryPoint) -> str | None:
    """The normalized name of the distribution declaring `entry` (PEP 503), None when unknown."""
    return re.sub(r"[-_.]+", "-", entry.dist.name).lower() if entry.dist is not None else None


def _version(entry: EntryPoint) -> str | None:
    return entry.dist.version if entry.dist is not None else None


def where_installed(entry: EntryPoint) -> str:
    """`mylab 0.1.0 at /path/site-packages`: the distribution declaring `entry` and the sys.path
    folder it was found in, for a message telling two copies apart."""
    if entry.dist is None:
        return "an unknown distribution"
    return f"{entry.dist.name} {entry.dist.version} at {entry.dist.locate_file('')}"


def load_entry_point(entry: EntryPoint) -> Any:
    """An entry point's object; a PluginError naming the entry point and its module otherwise."""
    try:
        return load_reference(entry.value)
    except PluginError as exc:
        of = f" of {entry.dist.name}" if entry.dist is not None else ""
        raise PluginError(f"entry point {entry.name!r}{of} ({entry.value}, group {GROUP}): {exc}") from None


def origin_of(name: str, entry: EntryPoint | None = None) -> PluginOrigin:
    if entry is None:
        return PluginOrigin(name=name, target=name)
    distribution = entry.dist.name if entry.dist is not None else None
    return PluginOrigin(name=name, target=entry.value, distribution=distribution)


def _what(value: Any) -> str:
    kind = "class" if inspect.isclass(value) else type(value).__name__
    return f"a {kind} {getattr(value, '__qualname__', repr(value)[:60])}"


def adapt_class(value: Any, name: str, *, kind: str, base: type, config_base: type[BaseModel], name_field: str) -> Any:
    """A plugin's subclass of `base` as the entry registered as `name`: a subclass whose `name` is
    `name` and whose config model (a subclass of `config_base`) takes `<name_field> = name`, the
    recipe's spelling. PluginKindError names what is wrong: another kind, an abstract class, a
    config model of another kind."""
    from pydantic import create_model

    if not (inspect.isclass(value) and issubclass(value, base)):
        raise PluginKindError(
            f"a {kind} is a subclass of {base.__module__}.{base.__qualname__}; this is {_what(value)}"
        )
    if inspect.isabstract(value):
        missing = ", ".join(sorted(getattr(value, "__abstractmethods__", ())))
        raise PluginKindError(f"{value.__name__} does not implement {missing}")
    config_model = getattr(value, "config_model", None) or config_base
    if not (inspect.isclass(config_model) and issubclass(config_model, config_base)):
        raise PluginKindError(
            f"{value.__name__}.config_model must subclass {config_base.__module__}.{config_base.__qualname__}"
        )
    spelled: Any = Literal[name]  # the recipe's name, a type made at runtime
    fields: dict[str, Any] = {name_field: (spelled, name)}
    config = create_model(config_model.__name__, __base__=config_model, __module__=config_model.__module__, **fields)
    return type(
        value.__name__,
        (value,),
        {"name": name, "config_model": config, "__module__": value.__module__, "__doc__": value.__doc__},
    )


def reference_of(value: Any) -> str:
    """The `module:attr` reference that names `value` — a class or function by its module and
    qualified name, another object by a module-level name bound to it — checked by loading it
    back. A PluginError says why there is none (defined inside a function, a lambda, an instance
    bound to no module-level name)."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        if "<" in qualname:  # <locals>, <lambda>
            raise PluginError(
                f"{_what(value)} has no import path (it is defined inside a function, or is a lambda): define it "
                f"at the top level of a module (or a notebook cell) and pass it from there"
            )
        reference = f"{module}:{qualname}"
        if _loads_back(reference, value):
            return reference
    # an instance (a compiled graph, a BenchmarkSpec): the module-level name it is bound to, if any
    main = sys.modules.get("__main__")
    modules = [("__main__", main)] if main is not None else []
    modules += [(name, m) for name, m in list(sys.modules.items()) if name != "__main__"]
    for name, held in modules:
        namespace = getattr(held, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, bound in list(namespace.items()):
            if bound is value and _REFERENCE.match(f"{name}:{attr}") and not attr.startswith("_"):
                return f"{name}:{attr}"
    raise PluginError(
        f"{_what(value)} has no import path: bind it to a name at the top level of a module (or a notebook "
        "cell), e.g. `graph = builder.compile()`, or pass its class or factory"
    )


def _loads_back(reference: str, value: Any) -> bool:
    try:
        return load_reference(reference) is value
    except PluginError:
        return False
