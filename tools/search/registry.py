"""Search providers by name. Each provider module registers its class when imported."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.tools.search.base import SearchProvider
from atelier.tools.service import service_class, service_options

PROVIDERS: NamedRegistry[type[SearchProvider]] = NamedRegistry(
    "search provider",
    modules=(
        "atelier.tools.search.searxng",
        "atelier.tools.search.tavily",
        "atelier.tools.search.serper",
        "atelier.tools.search.brave",
    ),
)
FIELD = "[web] provider"


def register_provider(cls: type[SearchProvider]) -> type[SearchProvider]:
    return PROVIDERS.register(cls.name, cls)


def provider_names() -> list[str]:
    return PROVIDERS.names()


def provider_class(name: str) -> type[SearchProvider]:
    return service_class(PROVIDERS, name, FIELD)


def provider_config(name: str, options: dict[str, Any]) -> BaseModel:
    return service_options(PROVIDERS, name, options, FIELD)
