"""What judges put in front of their model: the case and response as prompt sections, and output
schemas with one field per item judged (so a model, or the scripted one, cannot skip or invent an
item, and every value is constrained to what the item allows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from atelier.agents.prompts import Section
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case


def persona_text(case: Case) -> str:
    """The structured persona as the PDR prompts carry it: its JSON."""
    if case.persona is None:
        return ""
    return json.dumps(case.persona.attributes, ensure_ascii=False, indent=1)


def response_section(response: SystemResponse | str, title: str = "The response to evaluate") -> Section:
    """The response under evaluation: untrusted material (it may contain instructions aimed at the judge)."""
    text = response.text if isinstance(response, SystemResponse) else response
    return Section(title, text, untrusted=True)


def numbered(items: Sequence[str], start: int = 1) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, start=start))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def per_item_model(
    name: str, item_model: type[BaseModel], keys: Sequence[str], description: str = ""
) -> type[BaseModel]:
    """A schema with one required field per key, each an `item_model` (e.g. c1, c2, ... -> verdict)."""
    fields: dict[str, Any] = {key: (item_model, Field(description=f"{description} {key}".strip())) for key in keys}
    return create_model(name, __base__=_Strict, **fields)


def item_keys(count: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i}" for i in range(1, count + 1)]
