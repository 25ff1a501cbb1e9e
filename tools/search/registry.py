"""Search providers by name. Each provider module registers its class when imported."""

from __future__ import annotations

from tools.search.base import SearchProvider
from tools.service import ServiceRegistry

PROVIDERS: ServiceRegistry[type[SearchProvider]] = ServiceRegistry(
    "search provider",
    "[web] provider",
    ("tools.search.searxng", "tools.search.tavily", "tools.search.serper", "tools.search.brave"),
)
register_provider = PROVIDERS.register
provider_names = PROVIDERS.names
provider_class = PROVIDERS.get
provider_config = PROVIDERS.parse_options
