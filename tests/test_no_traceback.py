"""No input a user can give produces a bare traceback: run folders damaged in any file, command-line
flags with any value. Recipes and data files have their own fuzz tests (test_recipe_fuzz.py,
test_loader_fuzz.py); the inputs the issue lists are pinned in test_cli_errors.py.

Each case runs `atelier` in this process and must end with exit 0 (the input was usable) or exit
2 with one `error:` line naming the file or flag — never exit 1, which is the CLI's verdict for a
bug (an exception nothing anticipated), nor a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from atelier.runs.cli import main
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe
from tests.test_cli_errors import DEEP, TINY

FILES = ["config.json", "results.jsonl", "ledger.jsonl", "checkpoints.sqlite", "summary.json", "report.html"]
WRONG_TYPES = [17, -1, 2.5, "x", "", None, True, [], {}, ["a"], {"k": 1}]


def atelier(*args: str) -> tuple[int, str]:
    """`atelier ARGS` in this process: (exit code, stderr)."""
    err = io.StringIO()
    argv, sys.argv = sys.argv, ["atelier", *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.argv = argv
    return code, err.getvalue()


def assert_clean_ending(code: int, err: str, *names: str) -> None:
    assert "Traceback" not in err, err
    assert code in (0, 2), f"exit {code}: {err}"
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert errors, err
        assert any(name in errors[0] for name in names), f"{errors[0]!r} names none of {names}"


# ------------------------------------------------------------------------------------ run folders


@lru_cache(maxsize=1)
def template() -> tuple[Path, Path]:
    """A finished run of the tiny benchmark (one system, three cases), to copy and damage."""
    root = Path(tempfile.mkdtemp(prefix="atelier-template-run-"))
    recipe = root / "tiny.toml"
    recipe.write_text(
        TINY.replace(
            '[[systems]]\nname = "none"\nmemory = { backend = "none" }',
            '[[systems]]\nname = "full"\nmemory = { backend = "full" }',
        )
    )
    folder = run_recipe(load_recipe(recipe), root / "run", progress=False).path
    return recipe, folder


def _retype(raw: bytes, relpath: str, data: st.DataObject) -> bytes:
    """One JSON value (of one line, for JSON Lines) replaced by a value of another type."""

    def swap(doc):
        slots = []
        pending = [doc]
        while pending:
            node = pending.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for key, value in items:
                slots.append((node, key))
                pending.append(value)
        if slots:
            node, key = slots[data.draw(st.integers(0, len(slots) - 1), label="slot")]
            node[key] = data.draw(
                st.sampled_from([v for v in WRONG_TYPES if type(v) is not type(node[key])]), label="value"
            )
        return doc

    if relpath.endswith(".jsonl"):
        lines = raw.decode().splitlines()
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = json.dumps(swap(json.loads(lines[i])))
        return ("\n".join(lines) + "\n").encode()
    return json.dumps(swap(json.loads(raw))).encode()


def damage(path: Path, kind: str, data: st.DataObject) -> None:
    raw = path.read_bytes()
    if kind == "delete":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)), label="cut")])
    elif kind == "flip":
        out = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            out[data.draw(st.integers(0, len(out) - 1), label="pos")] ^= data.draw(st.integers(1, 255), label="xor")
        path.write_bytes(bytes(out))
    elif kind == "garbage":
        path.write_bytes(
            data.draw(
                st.sampled_from([b"", b"\x00" * 64, b"not json\n", DEEP.encode(), b"\xff\xfe{}"]), label="garbage"
            )
        )
    elif kind == "retype" and path.suffix in (".json", ".jsonl"):
        path.write_bytes(_retype(raw, path.name, data))


@pytest.mark.battery  # hypothesis over damaged run folders, each a run
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_damaged_run_folder_resumes_or_is_one_clear_error(data):
    recipe, source = template()
    name = data.draw(st.sampled_from(FILES + FILES[:4] * 2), label="file")  # mostly the files a resume reads
    kind = data.draw(st.sampled_from(["delete", "truncate", "flip", "garbage", "retype", "retype"]), label="damage")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        shutil.copytree(source, folder)
        damage(folder / name, kind, data)
        code, err = atelier("run", str(recipe), "--no-progress", "--out", str(folder))
        event(f"{name} {kind}: exit {code}")
        assert_clean_ending(code, err, str(folder))
        if code == 0:
            summary = json.loads((folder / "summary.json").read_text())
            assert summary["systems"]["full"]["n"] + summary["systems"]["full"]["errors"] == 3


# ------------------------------------------------------------------------------------ flags


@pytest.fixture
def files(tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY)
    (tmp_path / "notes.txt").write_text("notes")
    (tmp_path / "deep.json").write_text(DEEP)
    (tmp_path / "nan.json").write_text('{"values": [1, NaN]}')
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "config.json").write_text('{"run_id": "x", "recipe": {"name": ')
    (tmp_path / "damaged" / "results.jsonl").write_text("")
    return tmp_path


FLAG_CASES = [
    (["run", "{tmp}/missing.toml"], "missing.toml"),
    (["run", "{tmp}"], "{tmp}"),
    (["run", "{tmp}/tiny.toml", "--limit", "0"], "--limit"),
    (["run", "{tmp}/tiny.toml", "--limit", "many"], "--limit"),
    (["run", "{tmp}/tiny.toml", "--out", "{tmp}/notes.txt/run"], "notes.txt"),
    (["run", "{tmp}/tiny.toml", "--model", "scripted?seed=x"], "--model"),
    (["run", "{tmp}/tiny.toml", "--no-such-flag"], "--no-such-flag"),
    (["recipe", "check", "{tmp}/notes.txt"], "notes.txt"),
    (["metric", "nope"], "nope"),
    (["metric", "ranking"], "--input"),
    (["metric", "ranking", "--input", "{tmp}/deep.json"], "deep.json"),
    (["metric", "bootstrap_ci", "--input", "{tmp}/nan.json"], "nan.json"),
    (["metric", "bootstrap_ci", "--input", "{tmp}"], "{tmp}"),
    (["memory", "eval", "--benchmark", "nope", "--backend", "none"], "nope"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "nope"], "nope"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "none", "--query", "sideways"], "--query"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "retrieval", "--param", "k"], "--param"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "retrieval", "--param", "k=" + "[" * 5000], "k"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "none", "--option", "colour=red"], "colour"),
    (["memory", "eval", "--benchmark", "tiny", "--backend", "none", "--split", "nope"], "nope"),
    (["data", "check", "nope"], "nope"),
    (["web", "serve", "--corpus", "{tmp}/missing-corpus"], "missing-corpus"),
    (["web", "search", "x", "--max-results", "many"], "--max-results"),
    (["rescore", "{tmp}", "--judge", "lampqa_aspects"], "{tmp}"),
    (["rescore", "{tmp}/damaged", "--judge", "lampqa_aspects"], "config.json"),
    (["rescore", "{tmp}/damaged", "--judge", "{not json"], "--judge"),
]


@pytest.mark.parametrize(
    ("args", "named"), FLAG_CASES, ids=[" ".join(a[:3]) + f" #{i}" for i, (a, _) in enumerate(FLAG_CASES)]
)
def test_a_bad_flag_is_one_clear_error(files, cache_dir, args, named):
    code, err = atelier(*(a.replace("{tmp}", str(files)) for a in args))
    assert code == 2, err
    assert_clean_ending(code, err, named.replace("{tmp}", str(files)))


TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_flag_value_ends_cleanly(files, data):
    value = data.draw(TEXT, label="value")
    args = data.draw(
        st.sampled_from(
            [
                ["run", str(files / "tiny.toml"), "--limit", value, "--out", str(files / "r")],
                ["run", value],
                ["recipe", "check", value],
                ["metric", value, "--input", str(files / "nan.json")],
                ["metric", "ranking", "--input", value],
                ["memory", "eval", "--benchmark", "tiny", "--backend", "retrieval", "--param", value],
                ["memory", "eval", "--benchmark", "tiny", "--backend", "none", "--option", value],
                ["memory", "eval", "--benchmark", value, "--backend", "none"],
                ["data", "check", value],
            ]
        ),
        label="command",
    )
    code, err = atelier(*args)
    event(f"{args[0]}: exit {code}")
    assert "Traceback" not in err, err
    assert code in (0, 2) or (args[:2] == ["data", "check"] and code == 1), f"exit {code}: {err}"
