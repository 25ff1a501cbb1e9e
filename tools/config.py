"""`WebConfig`: everything a run needs to build its web (provider, reader, cache, caps, allow-list).

The recipe layer embeds it as the `[web]` table:

    [web]
    provider = "searxng"      # without provider_options.base_url: the sandbox web
    mode = "record"           # live | record | replay
    [web.sandbox]
    corpus = "wiki"           # sample | wiki | a folder or .jsonl file
    ranker = "bm25"           # bm25 | hybrid

Per-run settings win over environment variables: an `api_key` in `provider_options` is used
before the provider's documented variable (TAVILY_API_KEY, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from atelier.benchmarks.common.errors import ConfigError
from atelier.tools.caps import FetchCaps
from atelier.tools.url_guard import HostEntry

CacheMode = Literal["live", "record", "replay"]
RankerName = Literal["bm25", "hybrid"]


class SandboxConfig(BaseModel):
    """The sandbox web behind the `searxng` provider when it has no `base_url`."""

    model_config = ConfigDict(extra="forbid")

    corpus: str = Field(default="sample", description="'sample', 'wiki', or a folder / .jsonl file of documents.")
    ranker: RankerName = "bm25"
    url: str | None = Field(
        default=None,
        description="Base URL of a sandbox already serving this corpus (`atelier web serve`); "
        "unset: one is started in-process for the run.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port.")

    def origin(self) -> str:
        """The name of this web in cache keys: the same corpus gives the same key on any port."""
        return f"sandbox:{self.corpus}"


class WebConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = "searxng"
    provider_options: dict[str, Any] = Field(default_factory=dict)
    reader: str = Field(
        default="direct", description="How pages are fetched: 'direct' (httpx + trafilatura) or 'jina'."
    )
    reader_options: dict[str, Any] = Field(default_factory=dict)
    sandbox: SandboxConfig | None = Field(
        default=None, description="Settings of the sandbox web; used when provider is 'searxng' without base_url."
    )
    max_results: int = Field(default=10, ge=1, le=100)
    mode: CacheMode = Field(default="record", description="live: no cache; record: read-through; replay: cache only.")
    cache_dir: Path | None = Field(default=None, description="Unset: <atelier cache>/web.")
    copy_dir: Path | None = Field(
        default=None,
        description="A folder every answer is also copied into, when the cache lives elsewhere: a run "
        "keeps its own complete record of the web it saw (set by the runner to the run folder's web/).",
    )
    caps: FetchCaps = Field(default_factory=FetchCaps)
    allow_hosts: list[str] = Field(
        default_factory=list,
        description="host or host:port entries the URL guard lets through even when private or loopback.",
    )

    @field_validator("allow_hosts")
    @classmethod
    def _parse_hosts(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            HostEntry.parse(entry)  # ConfigError naming a malformed entry
        return entries

    @model_validator(mode="after")
    def _check_names_and_options(self) -> WebConfig:
        # ConfigError passes through pydantic unchanged, so the message names the [web] field.
        from atelier.tools.readers.registry import reader_config
        from atelier.tools.search.registry import provider_config

        provider_config(self.provider, self.provider_options)
        reader_config(self.reader, self.reader_options)
        if self.sandbox is not None and not self.uses_sandbox:
            raise ConfigError(
                f"[web.sandbox] is set but provider {self.provider!r} with base_url "
                f"{self.provider_options.get('base_url')!r} does not use the sandbox web"
            )
        if self.uses_sandbox and self.reader != "direct":
            raise ConfigError(
                f"[web] reader {self.reader!r} cannot read the sandbox web (it lives on loopback); use 'direct'"
            )
        return self

    @field_serializer("provider_options", "reader_options", when_used="json")
    def _without_secrets(self, options: dict[str, Any]) -> dict[str, Any]:
        # a config dumped as JSON lands in run folders (config.json): keys stay out, and a config
        # reloaded from there falls back to the environment variable instead of carrying a secret
        # around. A Python dump (copying a recipe in memory) keeps them.
        return {name: value for name, value in options.items() if name != "api_key"}

    @property
    def uses_sandbox(self) -> bool:
        return self.provider == "searxng" and not self.provider_options.get("base_url")

    @property
    def sandbox_settings(self) -> SandboxConfig:
        return self.sandbox or SandboxConfig()
