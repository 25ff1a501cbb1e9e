"""API keys of web services: taken from the run's configuration, else from a documented variable."""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, SecretStr

from atelier.benchmarks.common.errors import ConfigError


class KeyedServiceConfig(BaseModel):
    """Options of a service that needs an API key. Subclasses name their environment variable."""

    model_config = ConfigDict(extra="forbid")

    api_key_env: ClassVar[str]
    api_key: SecretStr | None = None

    def require_key(self, service: str) -> str:
        """The key, configuration first (per-run settings win), then the environment variable."""
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        from_env = os.environ.get(self.api_key_env, "")
        if from_env:
            return from_env
        raise ConfigError(
            f"{service} needs an API key: set {self.api_key_env} or give api_key in the [web] options of {service}"
        )
