"""The smaller boundaries of issue 42 (item 6), each bad input one clear line and exit 2: a full
disk under --out (and a resume once there is room), system names that look alike or hide
characters, rich markup and bidi controls in the terminal table, a run folder whose config.json
was deleted or edited, an integer JSON cannot hold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.runs.cli import main
from atelier.runs.folder.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = """name = "small"
{seed}
[benchmark]
name = "sample"
{limit}
[models.system]
model = "scripted"
[models.judge]
model = "scripted"
[[systems]]
name = "{name}"
memory = {{ backend = "none" }}
[[judges]]
name = "lampqa_aspects"
"""


def recipe_file(tmp_path: Path, name: str = "direct-none", seed: int | None = None, limit: int | None = 2) -> Path:
    path = tmp_path / f"recipe-{abs(hash((name, seed, limit)))}.toml"
    text = RECIPE.format(
        name=name.replace('"', '\\"'),
        seed=f"seed = {seed}" if seed is not None else "",
        limit=f"limit = {limit}" if limit else "",
    )
    path.write_text(text)
    return path


def atelier(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["atelier", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------------------ a full disk


def unshare_works() -> bool:
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return done.returncode == 0


@pytest.mark.battery  # a disk filled at three depths of a run, each a run and a resume
# (the run of two episodes peaks between 280k and 300k on disk: 260k fills at an append to its results)
@pytest.mark.parametrize("size", ["40k", "120k", "260k"])
def test_a_full_disk_under_out_is_one_line_and_exit_2_and_a_resume_with_room_finishes(tmp_path, size):
    """A tmpfs of `size` (in a mount namespace of the test's own) fills at a different step each time:
    the checkpoint database's creation, an SQLite commit, an append to results or the ledger."""
    if not shutil.which("unshare") or not unshare_works():
        pytest.skip("no user namespaces here to mount a small file system")
    recipe = recipe_file(tmp_path)
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    env = {**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {mount_point} && "
        f"{sys.executable} -m atelier.runs.cli run {recipe} --no-progress --out {mount_point}/run; "
        f"code=$?; cp -r {mount_point}/run {tmp_path}/kept; exit $code"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "no space left on the disk of the run folder" in errors[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "a bug" not in done.stderr
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "atelier.runs.cli",
            "run",
            str(recipe),
            "--no-progress",
            "--out",
            str(tmp_path / "kept"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "episodes: 2 scored, 0 failed (of 2)" in resumed.stderr


# ------------------------------------------------------------------------------ names


def systems(*names: str) -> dict:
    return {
        "name": "n",
        "benchmark": {"name": "sample", "limit": 1},
        "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
        "systems": [{"name": n, "memory": {"backend": "none"}} for n in names],
        "judges": [{"name": "lampqa_aspects"}],
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("café", unicodedata.normalize("NFD", "café")),  # composed and decomposed: the same text
        ("Direct", "direct"),  # one folder on a case-insensitive file system
    ],
)
def test_names_that_are_the_same_text_are_one_name(first, second):
    with pytest.raises(ConfigError, match=r"names must be unique \(ignoring case\)"):
        parse_recipe(systems(first, second))


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("\ufb01le", "stand for others (ligatures, fullwidth or styled letters): write 'file'"),
        ("ｄｉｒｅｃｔ", "write 'direct'"),
        ("a ", "has spaces around it"),
        (" a", "has spaces around it"),
        ("di\u200drect", "do not show (U+200D)"),
        ("evil\u202etxt.exe", "do not show (U+202E)"),
        ("a\u2028b", "do not show (U+2028)"),
    ],
)
def test_a_name_that_looks_like_another_or_hides_characters_is_refused(name, said):
    with pytest.raises(ConfigError) as refused:
        parse_recipe(systems(name, "other"))
    assert said in str(refused.value) and "systems[0]" in str(refused.value)


def test_a_decomposed_name_is_kept_composed():
    recipe = parse_recipe(systems(unicodedata.normalize("NFD", "café")))
    assert recipe.systems[0].name == "café" and len(recipe.systems[0].name) == 4


def test_markup_in_a_name_is_printed_as_written(tmp_path, capsys, monkeypatch):
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        str(recipe_file(tmp_path, "[bold red]x")),
        "--no-progress",
        "--out",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    assert "[bold red]x" in err  # in the summary table, as text


def test_terminal_cells_show_hidden_characters_escaped():
    from rich.console import Console
    from rich.table import Table

    from atelier.runs.reading.terminal_text import cells, visible

    assert visible("case\u202e1") == "case\\u202e1" and visible("plain") == "plain"
    table = Table()
    table.add_column("system")
    table.add_row(*cells("[bold red]x\u202ey"))
    console = Console(record=True, width=80, color_system=None)
    console.print(table)
    shown = console.export_text()
    assert "[bold red]x\\u202ey" in shown and "\u202e" not in shown


# ------------------------------------------------------------------------------ config.json


def test_results_without_their_config_json_are_not_adopted(tmp_path, capsys, monkeypatch):
    recipe, out = recipe_file(tmp_path), tmp_path / "run"
    assert atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(out))[0] == 0
    (out / "config.json").unlink()
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(recipe_file(tmp_path, seed=7)), "--no-progress", "--out", str(out)
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"error: {out} holds results but no config.json saying which recipe made them; restore its config.json, "
        "or choose a new --out folder"
    )


def test_an_edited_config_json_does_not_pass_off_old_outputs_as_a_new_seed(tmp_path, capsys, monkeypatch):
    """Every case of the sample suite (no limit: the seed picks no other cases), so the episodes' keys
    are the same under both seeds."""
    recipe, out = recipe_file(tmp_path, seed=0, limit=None), tmp_path / "run"
    assert atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(out))[0] == 0
    config = json.loads((out / "config.json").read_text())
    config["recipe"]["seed"] = 7  # edited to match the recipe that comes next
    (out / "config.json").write_text(json.dumps(config))
    seven = recipe_file(tmp_path, seed=7, limit=None)
    code, _, err = atelier(capsys, monkeypatch, "run", str(seven), "--no-progress", "--out", str(out))
    assert code == 2
    assert "was made by another recipe than this one" in err and "Traceback" not in err


# ------------------------------------------------------------------------------ JSON


def test_an_integer_json_cannot_hold_is_a_data_error_naming_the_file():
    from atelier.benchmarks.common.json_input import parse_json

    with pytest.raises(DataError, match=r"^contexts.jsonl:3: invalid JSON: Exceeds the limit \(4300 digits\)"):
        parse_json(b'{"n": ' + b"9" * 5000 + b"}", file="contexts.jsonl", line=3)
