"""Memory backends by name, each with its typed config (mem0 / BaseStore style registry).

A researcher's own backend is named by reference (`backend = "mylab.memory:KeywordMemory"`) or by
its entry point (benchmarks/common/plugins.py): a `MemoryBackend` subclass, registered under the
name the recipe gives it, its `config_model` (default: `MemoryConfig`) validating its options as a
built-in's are (`backend` set to that name)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.plugins import PluginKindError, adapt_class
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryEnv, UserContext
from atelier.memory.contract import made_invalid

# The protocol's methods a run awaits (memory/base.py MemoryBackend): each must be an `async def`.
AWAITED = ("ingest", "context", "state_digest", "aclose")


def not_async(cls: type) -> list[str]:
    """The protocol methods `cls` defines as a plain `def` (a run awaits them: a plain one's result
    cannot be awaited), in AWAITED's order."""
    return [method for method in AWAITED if not _awaitable(getattr(cls, method, None))]


def _awaitable(method: Any) -> bool:
    """An `async def`, or one wrapped by a decorator that keeps it (`functools.wraps`)."""
    return inspect.iscoroutinefunction(method) or (
        method is not None and inspect.iscoroutinefunction(inspect.unwrap(method))
    )


def async_problem(cls: type, shown: str) -> str | None:
    """Why `cls` (shown as `shown`) cannot be awaited as the protocol awaits it; None when it can."""
    plain = not_async(cls)
    if not plain:
        return None
    one = len(plain) == 1
    methods = ", ".join(f"{shown}.{method}()" for method in plain)
    return (
        f"{methods} {'is a' if one else 'are'} plain `def`; the memory protocol "
        f"(atelier.memory.base.MemoryBackend) awaits {'it' if one else 'them'}: make {'it' if one else 'them'} `async def`"
    )


def plugin_backend(value: Any, name: str) -> type[MemoryBackend]:
    """A plugin's `MemoryBackend` subclass as the backend registered as `name`: a subclass whose
    `name` is `name` and whose config model takes `backend = name` (the recipe's spelling), its
    protocol methods each an `async def` (PluginKindError naming those that are not)."""
    adapted: type[MemoryBackend] = adapt_class(
        value, name, kind="memory backend", base=MemoryBackend, config_base=MemoryConfig, name_field="backend"
    )
    problem = async_problem(adapted, value.__name__)
    if problem is not None:
        raise PluginKindError(problem)
    adapted.context = _schema_held(adapted.context)  # type: ignore[method-assign, assignment]
    return adapted


def _schema_held(made: Callable[..., Awaitable[UserContext]]) -> Callable[..., Awaitable[UserContext]]:
    """A plugin's `context()` whose UserContext (or ContextShare) refused by its schema as the backend
    makes it (tokens=-1 passed to the constructor) breaks the clause 'contexts in the UserContext
    schema' (ContractBroken: the episode fails naming it), as a context made valid and edited after
    does (memory/contract.py `checked_context`)."""

    @functools.wraps(made)
    async def context(self: MemoryBackend, *args: Any, **kwargs: Any) -> UserContext:
        try:
            return await made(self, *args, **kwargs)
        except ValidationError as exc:
            broken = made_invalid(exc, self.name)
            if broken is None:
                raise
            raise broken from None

    return context


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
    """Class decorator: `@register_backend` on a MemoryBackend with `name` and `config_model` (its
    protocol methods each an `async def`)."""
    problem = async_problem(cls, cls.__name__)
    if problem is not None:
        raise TypeError(problem)
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
