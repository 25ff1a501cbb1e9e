"""Test doubles for judges: a gateway answering with hand-written judge outputs, and a web of fixed pages."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.response import Citation
from atelier.benchmarks.common.errors import AtelierError

Answer = dict[str, Any] | Callable[[list[dict[str, Any]], ModelSettings], dict[str, Any]]


class HandWritten(Gateway):
    """Answers `structured` with hand-written outputs chosen by the schema's name; every answer still
    goes through the schema's validation, as a provider's would."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        super().__init__({"judge": ModelSettings(model="hand-written")})
        self.answers = answers
        self.calls: list[tuple[str, str, list[dict[str, Any]]]] = []

    async def structured(self, role, messages, schema):
        self.calls.append((role, schema.__name__, messages))
        answer = self.answers[schema.__name__]
        value = answer(messages, self.settings(role)) if callable(answer) else answer
        return schema.model_validate(value)

    async def text(self, role, messages):  # judges never ask for free text
        raise AssertionError(f"unexpected text call by {role}")

    def count(self, schema_name: str) -> int:
        return sum(1 for _, name, _ in self.calls if name == schema_name)


def prompt(messages: list[dict[str, Any]]) -> str:
    return "\n".join(m["content"] for m in messages)


@dataclass
class FakePage:
    url: str
    text: str
    title: str = ""


class FakeWeb:
    """Fixed pages by URL; any other URL fails like an unreadable page."""

    def __init__(self, pages: dict[str, str]) -> None:
        self.pages = pages
        self.fetched: list[str] = []

    async def fetch(self, url: str) -> FakePage:
        self.fetched.append(url)
        if url not in self.pages:
            raise AtelierError(f"fetch failed: {url} (404)")
        return FakePage(url=url, text=self.pages[url])


class HashedCitation(Citation):
    """A citation carrying the sha256 of the text the system read (issue 12's field)."""

    sha256: str | None = None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def serving(web):
    """A judge environment's `web`: opened on first use, as the run's is (`Resources.open_web`)."""

    async def open_web():
        return web

    return open_web
