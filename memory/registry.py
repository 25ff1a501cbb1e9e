"""Memory backends by name, each with its typed config (mem0 / BaseStore style registry).

A researcher's own backend is named by reference (`backend = "mylab.memory:KeywordMemory"`) or by
its entry point (benchmarks/common/plugins.py): a `MemoryBackend` subclass, registered under the
name the recipe gives it, its `config_model` (default: `MemoryConfig`) validating its options as a
built-in's are (`backend` set to that name)."""

from __future__ import annotations

from typing import Any

from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.plugins import adapt_class
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryEnv


def plugin_backend(value: Any, name: str) -> type[MemoryBackend]:
    """A plugin's `MemoryBackend` subclass as the backend registered as `name`: a subclass whose
    `name` is `name` and whose config model takes `backend = name` (the recipe's spelling)."""
    return adapt_class(
        value, name, kind="memory backend", base=MemoryBackend, config_base=MemoryConfig, name_field="backend"
    )


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
