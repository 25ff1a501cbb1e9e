"""What search providers and page readers share: typed options, an API key check, lookup by name."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.json_input import validate_strictly
from atelier.benchmarks.common.named_registry import NamedRegistry, UnknownNameError
from atelier.tools.api_keys import KeyedServiceConfig
from atelier.tools.http import GuardedHttp


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


S = TypeVar("S", bound=WebService)


def service_class(registry: NamedRegistry[type[S]], name: str, config_field: str) -> type[S]:
    """The registered class, or ConfigError naming the [web] field that chose it."""
    try:
        return registry.get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"{config_field}: {exc}") from None


def service_options(
    registry: NamedRegistry[type[S]], name: str, options: dict[str, Any], config_field: str
) -> BaseModel:
    """The service's typed options; a bad one raises ConfigError naming its field."""
    return parse_options(
        service_class(registry, name, config_field).Options, options, f"{config_field} options of {name}"
    )


def parse_options(model: type[BaseModel], options: dict[str, Any], where: str) -> BaseModel:
    """Validate a provider's or reader's options; a bad one raises ConfigError naming its field."""
    try:
        return validate_strictly(model, options)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(options)"
        raise ConfigError(f"{where}: field '{field}': {first['msg']}") from None
