"""Text shown in a terminal table as what it is: never read as rich markup (`[bold red]` in a name
stays those characters), and no character that moves or hides text — a control, a bidi override
(U+202E), a zero-width joiner — printed raw: each is shown as its `\\u` escape."""

from __future__ import annotations

import unicodedata
from typing import Any

from rich.text import Text

_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Co", "Cs")


def visible(text: str) -> str:
    """`text` with every control, format (bidi, zero-width) or separator character escaped."""
    if all(c.isprintable() and unicodedata.category(c) not in _HIDDEN for c in text):
        return text
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _HIDDEN and c not in "\n\t" else c for c in text)


def cells(*values: Any) -> list[Any]:
    """A table row's cells: strings as plain, visible text (rich renderables as they are)."""
    return [Text(visible(v)) if isinstance(v, str) else v for v in values]


def name_columns(table: Any, headers: tuple[str, ...], rows: list[tuple[Any, ...]], names: int) -> None:
    """Add `headers` as columns: the first `names` hold names (a system, a judge, a model, a role),
    which are never folded or cut — each column as wide as its longest name, and a narrow terminal
    folds the other columns first; the rest fold between words. Then add `rows`."""
    for i, header in enumerate(headers):
        if i < names:
            longest = max([len(header), *(len(str(row[i])) for row in rows)], default=len(header))
            table.add_column(header, no_wrap=True, min_width=longest)
        else:
            table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*cells(*row))
