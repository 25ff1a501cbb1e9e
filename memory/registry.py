"""Memory backends by name, each with its typed config (mem0 / BaseStore style registry).

A researcher's own backend is named by reference (`backend = "mylab.memory:KeywordMemory"`) or by
its entry point (benchmarks/common/plugins.py): a `MemoryBackend` subclass, registered under the
name the recipe gives it, its `config_model` (default: `MemoryConfig`) validating its options as a
built-in's are (`backend` set to that name)."""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import create_model

from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.plugins import PluginKindError
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryEnv


def plugin_backend(value: Any, name: str) -> type[MemoryBackend]:
    """A plugin's `MemoryBackend` subclass as the backend registered as `name`: a subclass whose
    `name` is `name` and whose config model takes `backend = name` (the recipe's spelling)."""
    if not (inspect.isclass(value) and issubclass(value, MemoryBackend)):
        raise PluginKindError(
            f"a memory backend is a subclass of atelier.memory.base.MemoryBackend; this is {_what(value)}"
        )
    if inspect.isabstract(value):
        missing = ", ".join(sorted(getattr(value, "__abstractmethods__", ())))
        raise PluginKindError(f"{value.__name__} does not implement {missing}")
    base = getattr(value, "config_model", None) or MemoryConfig
    if not (inspect.isclass(base) and issubclass(base, MemoryConfig)):
        raise PluginKindError(f"{value.__name__}.config_model must subclass atelier.memory.base.MemoryConfig")
    spelled: Any = Literal[name]  # the recipe's name, a type made at runtime
    config = create_model(base.__name__, __base__=base, __module__=base.__module__, backend=(spelled, name))
    return type(
        value.__name__,
        (value,),
        {"name": name, "config_model": config, "__module__": value.__module__, "__doc__": value.__doc__},
    )


def _what(value: Any) -> str:
    kind = "class" if inspect.isclass(value) else type(value).__name__
    return f"a {kind} {getattr(value, '__qualname__', repr(value)[:60])}"


BACKENDS: NamedRegistry[type[MemoryBackend]] = NamedRegistry(
    "memory backend",
    modules=(
        "atelier.memory.backends.none",
        "atelier.memory.backends.full",
        "atelier.memory.backends.persona",
        "atelier.memory.backends.profile",
        "atelier.memory.backends.selected",
        "atelier.memory.backends.retrieval",
        "atelier.memory.backends.mem0",
        "atelier.memory.backends.hierarchical",
        "atelier.memory.backends.persona_model",
    ),
    adapt=plugin_backend,
)


def register_backend(cls: type[MemoryBackend]) -> type[MemoryBackend]:
    """Class decorator: `@register_backend` on a MemoryBackend with `name` and `config_model`."""
    return BACKENDS.register(cls.name, cls)


def backend_names() -> list[str]:
    return BACKENDS.names()


def backend_class(name: str) -> type[MemoryBackend]:
    return BACKENDS.get(name)


def parse_config(data: dict[str, Any] | MemoryConfig) -> MemoryConfig:
    """Validate a `{backend = ..., ...}` table with that backend's config model."""
    if isinstance(data, MemoryConfig):
        return data
    return backend_class(str(data.get("backend"))).config_model.model_validate(data)


def create_backend(config: MemoryConfig | dict[str, Any], env: MemoryEnv | None = None) -> MemoryBackend:
    config = parse_config(config)
    return backend_class(config.backend)(config, env)
