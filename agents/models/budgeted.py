"""List fields whose budget is part of the JSON schema a model answers in.

A step that wants "at most N" items (questions, queries, sub-topics, aspects) says so in its prompt
and keeps the first N. Saying it in the schema too (`maxItems`) matters to servers that hold output
to the schema: llama.cpp's grammars then close the list at the budget, where a weak model otherwise
goes on listing items until max_tokens cuts the JSON (SmolLM2-135M listed clarifying questions
that way). Servers that do not enforce the bound may still send more: the list is cut to the
budget before validation, as the step would have cut it, rather than sent back for repair.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints


def at_most(item: Any, max_items: int, *, min_items: int = 0, description: str | None = None) -> Any:
    """The type of a list of `min_items` to `max_items` items of `item` (empty by default when
    `min_items` is 0), for a model's annotation or `create_model`."""

    def keep_budget(value: Any) -> Any:
        return value[:max_items] if isinstance(value, list) else value

    default: dict[str, Any] = {} if min_items else {"default_factory": list}
    return Annotated[
        list[item],
        BeforeValidator(keep_budget),
        Field(min_length=min_items, max_length=max_items, description=description, **default),
    ]


ITEM_CHARS = 300  # one item of a listing (a question, a search query, an aspect): longer is a paragraph

# Such an item: non-empty, `maxLength` in the schema, so a grammar-held model cannot run on inside one
# string either.
ShortItem = Annotated[str, StringConstraints(min_length=1, max_length=ITEM_CHARS)]


def distinct_items(items: Iterable[str]) -> list[str]:
    """A listing's items as a step keeps them: stripped, blank and repeated ones dropped, in order."""
    return [s for s in dict.fromkeys(i.strip() for i in items) if s]
