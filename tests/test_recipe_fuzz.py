"""Property-based fuzzing of recipe files (hypothesis), as a careless user edits them: every
mutation of a valid recipe ends in one clear error naming the file (and the key or line), or in
a recipe that runs — never in any other exception.

Mutations work on the file's text: a value replaced by one of another type or out of range, a
key renamed, dropped or doubled, a line deleted or duplicated, a table header broken, bytes
flipped, invalid UTF-8, the file cut short. A mutated recipe that still loads is run (limit 1,
in a temporary folder) and must finish with every output written.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from atelier.benchmarks.common.errors import AtelierError
from atelier.runs.execution.preflight import PreflightError
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe
from atelier.tools.web import check_web_config

RECIPE = """\
name = "fuzz"
description = "every section a recipe can have"
seed = 3

[benchmark]
name = "tiny"
split = "all"
setting = "context"
limit = 2

[models.system]
model = "scripted"
temperature = 0.0
max_retries = 1
retry_backoff_s = 0.001

[models.judge]
model = "scripted?seed=2"
max_tokens = 256
timeout_s = 30

[[systems]]
name = "none"
pipeline = "direct"
memory = { backend = "none" }

[[systems]]
name = "full"
setting = "persona"
memory = { backend = "full", budget_tokens = 800 }
[systems.models.system]
model = "scripted?seed=5"

[[judges]]
name = "lampqa_aspects"
details = "auto"

[run]
concurrency = 2

[cache]
enabled = true

[web]
provider = "searxng"
mode = "record"
max_results = 5
allow_hosts = ["127.0.0.1:9"]
[web.caps]
max_bytes = 100000
max_redirects = 2
"""

VALUES = [
    "true",
    "false",
    "0",
    "-1",
    "17",
    "2.5",
    "1e309",
    "nan",
    "-inf",
    "99999999999999999999",
    '""',
    '"x"',
    '"none"',
    '"scripted?error_rate=2"',
    '"scripted?bogus=1"',
    '"scripted?latency_ms=1"',
    "[]",
    '["a", 1]',
    "{}",
    "{ k = 1 }",
    "1979-05-27",
    "07:32:00",
    "1979-05-27T07:32:00Z",
    "[" * 300 + "]" * 300,
    '"' + "é" * 50 + '"',
    '"\\u0000"',
]
ASSIGNMENT = re.compile(r"^(\s*)([A-Za-z_][\w.-]*)(\s*=\s*)(.*)$")


def _lines_with_values(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if ASSIGNMENT.match(line)]


def mutate(text: str, kind: str, data: st.DataObject) -> bytes:
    lines = text.splitlines()
    assigned = _lines_with_values(lines)
    if kind in ("value", "rename", "drop", "double"):
        i = data.draw(st.sampled_from(assigned), label="line")
        indent, key, eq, value = ASSIGNMENT.match(lines[i]).groups()
        if kind == "value":
            lines[i] = f"{indent}{key}{eq}{data.draw(st.sampled_from(VALUES), label='value')}"
        elif kind == "rename":
            lines[i] = f"{indent}{key}{data.draw(st.sampled_from(['x', '_', 's', 'Name']), label='suffix')}{eq}{value}"
        elif kind == "drop":
            del lines[i]
        else:
            lines.insert(i, lines[i])
    elif kind == "delete_line":
        del lines[data.draw(st.integers(0, len(lines) - 1), label="line")]
    elif kind == "duplicate_line":
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines.insert(data.draw(st.integers(0, len(lines)), label="at"), lines[i])
    elif kind == "header":
        headers = [i for i, line in enumerate(lines) if line.startswith("[")]
        i = data.draw(st.sampled_from(headers), label="line")
        lines[i] = data.draw(
            st.sampled_from(
                [
                    "[benchmarks]",
                    "[[benchmark]]",
                    "[systems]",
                    "[[models.system]]",
                    "[web.sandbox]",
                    "[models.jduge]",
                    lines[i][:-1],
                ]
            ),
            label="header",
        )
    raw = ("\n".join(lines) + "\n").encode()
    if kind == "flip":
        out = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 3), label="flips")):
            out[data.draw(st.integers(0, len(out) - 1), label="pos")] ^= data.draw(st.integers(1, 255), label="xor")
        raw = bytes(out)
    elif kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="cut")]
    elif kind == "latin1":
        raw = raw.replace(b"every section", "évery section".encode("latin-1"))
    return raw


KEY = r"[\w\[\]().-]+(?: [\w.]+)?"  # systems[1].memory.backend, [web] provider, (top level)


def names_file_and_place(message: str, path: Path) -> bool:
    """The message names the file, and a line or a key within it."""
    file = re.escape(str(path))
    first, *problems = message.splitlines()
    if problems:  # "invalid recipe (N problems)", then one indented line per problem
        return all(re.match(rf"\s+{file}(:\d+)?: {KEY}: ", p) for p in problems)
    return bool(re.search(rf"{file}(:\d+: |: {KEY}: |: not valid TOML: .*\(at (line \d+|end of document))", first))


@pytest.mark.battery
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_recipe_is_one_clear_error_or_a_run(data):
    kind = data.draw(
        st.sampled_from(
            [
                "value",
                "value",
                "value",
                "rename",
                "drop",
                "double",
                "delete_line",
                "duplicate_line",
                "header",
                "flip",
                "truncate",
                "latin1",
            ]
        ),
        label="mutation",
    )
    raw = mutate(RECIPE, kind, data)
    previous = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # relative paths a mutation writes into the recipe land here
        try:
            path = Path(tmp) / "recipe.toml"
            path.write_bytes(raw)
            try:
                recipe = load_recipe(path)
                check_web_config(recipe.web)
            except AtelierError as exc:
                assert names_file_and_place(str(exc), path), str(exc)
                event(f"{kind}: refused")
                return
            try:
                folder = run_recipe(recipe.with_overrides(limit=1, out_dir=tmp), progress=False)
            except PreflightError as exc:  # e.g. a model name litellm cannot place: refused before any episode
                assert all(re.match(r"(models\.|systems\[|judge |data |web: )", p) for p in exc.problems), str(exc)
                event(f"{kind}: refused by preflight")
                return
            event(f"{kind}: ran")
            assert folder.summary.exists() and folder.report.exists() and folder.results.read_text().strip()
        finally:
            os.chdir(previous)
