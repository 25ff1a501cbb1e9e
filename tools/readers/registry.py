"""Page readers by name. Each reader module registers its class when imported."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.tools.readers.base import PageReader
from atelier.tools.service import service_class, service_options

READERS: NamedRegistry[type[PageReader]] = NamedRegistry(
    "page reader", modules=("atelier.tools.readers.direct", "atelier.tools.readers.jina")
)
FIELD = "[web] reader"


def register_reader(cls: type[PageReader]) -> type[PageReader]:
    return READERS.register(cls.name, cls)


def reader_names() -> list[str]:
    return READERS.names()


def reader_class(name: str) -> type[PageReader]:
    return service_class(READERS, name, FIELD)


def reader_config(name: str, options: dict[str, Any]) -> BaseModel:
    return service_options(READERS, name, options, FIELD)
