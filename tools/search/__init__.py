"""Search providers behind one interface: `searxng` (the sandbox web by default), `tavily`, `serper`, `brave`."""

from atelier.tools.search.base import SearchProvider, SearchResult
from atelier.tools.search.registry import provider_class, provider_config, provider_names, register_provider

__all__ = ["SearchProvider", "SearchResult", "provider_class", "provider_config", "provider_names", "register_provider"]
