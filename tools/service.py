"""What search providers and page readers share: typed options, an API key check, a name registry."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from benchmarks.errors import ConfigError
from tools.api_keys import KeyedServiceConfig
from tools.http import GuardedHttp


def require_keys(service: str, options: BaseModel) -> None:
    if isinstance(options, KeyedServiceConfig):
        options.require_key(service)


class WebService:
    """A remote service reached through the guarded HTTP client. Subclasses set `name` and `Options`."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    def __init__(self, options: BaseModel, http: GuardedHttp) -> None:
        self.options = options
        self.http = http

    def validate(self) -> None:
        """Raise ConfigError if the service cannot run (a missing API key). Called before a run starts."""
        require_keys(self.name, self.options)

    def api_key(self) -> str:
        assert isinstance(self.options, KeyedServiceConfig), f"{self.name} takes no API key"
        return self.options.require_key(self.name)

    def options_identity(self) -> dict[str, Any]:
        """Options that change answers, for cache keys: never the key, never the (port-dependent) base URL."""
        return self.options.model_dump(mode="json", exclude={"api_key", "base_url"})


S = TypeVar("S", bound=type[WebService])


class ServiceRegistry(Generic[S]):
    """Services by name; the modules listed register their class when imported."""

    def __init__(self, kind: str, config_field: str, modules: tuple[str, ...]) -> None:
        self.kind = kind  # "search provider"
        self.config_field = config_field  # "[web] provider"
        self._modules = modules
        self._classes: dict[str, S] = {}

    def register(self, cls: S) -> S:
        if self._classes.get(cls.name, cls) is not cls:
            raise ValueError(f"{self.kind} {cls.name!r} is registered twice")
        self._classes[cls.name] = cls
        return cls

    def _load_all(self) -> None:
        for module in self._modules:
            importlib.import_module(module)

    def names(self) -> list[str]:
        self._load_all()
        return sorted(self._classes)

    def get(self, name: str) -> S:
        self._load_all()
        if name not in self._classes:
            raise ConfigError(f"{self.config_field}: unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._classes[name]

    def parse_options(self, name: str, options: dict[str, Any]) -> BaseModel:
        from tools.config import parse_options

        return parse_options(self.get(name).Options, options, f"{self.config_field} options of {name}")
