"""Page readers by name. Each reader module registers its class when imported."""

from __future__ import annotations

from tools.readers.base import PageReader
from tools.service import ServiceRegistry

READERS: ServiceRegistry[type[PageReader]] = ServiceRegistry(
    "page reader", "[web] reader", ("tools.readers.direct", "tools.readers.jina")
)
register_reader = READERS.register
reader_names = READERS.names
reader_class = READERS.get
reader_config = READERS.parse_options
