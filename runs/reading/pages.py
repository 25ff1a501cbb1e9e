"""What the reading pages (report.html, `atelier view`, `compare --html`) share: their templates'
folder and environment (jinja2, autoescaped; one stylesheet and the judgment and response macros
live in the templates), and the ids that link one page to another."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

TEMPLATE_DIR = Path(__file__).parent / "templates"
EPISODES_DIR = "episodes"  # the view's folder of episode pages (`atelier view --static DIR`)


def anchor(text: str) -> str:
    """An HTML id for a case or a (case, system) cell."""
    return "".join(ch if ch.isalnum() else "-" for ch in text)


def cell_anchor(key: str) -> str:
    """The id of the cell of result key `<case>::<system>` in the per-case view."""
    return "cell-" + anchor(key)


def episode_page(key: str) -> str:
    """The file name of an episode's page in the view: readable, and unique even when two keys read alike."""
    return f"{anchor(key)}-{hashlib.sha1(key.encode()).hexdigest()[:8]}.html"


def number(value: Any, digits: int = 3) -> str:
    """A number as the pages show it: floats to `digits` places, None as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def environment(*, strict: bool = False):
    """The pages' jinja2 environment, with the filters and macros every page may use."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    from atelier.benchmarks.common.degradation import KINDS
    from atelier.benchmarks.common.names import visible_bidi
    from atelier.benchmarks.controls import CONTROL_KINDS
    from atelier.runs.reading.judgment_reading import raw_json, read_judgment

    options: dict[str, Any] = {"undefined": StrictUndefined} if strict else {}
    env = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        autoescape=select_autoescape(["html", "j2"]),
        finalize=visible_bidi,  # no text a model wrote reorders the page
        **options,
    )
    env.filters["num"] = number
    env.filters["as_json"] = raw_json
    env.filters["tojson_attr"] = lambda value: json.dumps(value, sort_keys=True)
    env.globals["read_judgment"] = read_judgment
    env.globals["kind_help"] = KINDS
    env.globals["control_help"] = CONTROL_KINDS
    env.globals["cell_anchor"] = cell_anchor
    return env
