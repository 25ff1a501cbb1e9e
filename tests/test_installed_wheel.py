"""The wheel, installed, outside any checkout (issue 52): shipped recipes by name whatever folders
stand in the directory, a README path form refused naming the shipped recipe, and a shipped recipe's
relative paths read from the current directory.

The wheel is built from this checkout (`pip wheel --no-deps`) and unpacked into a fresh venv whose
only other path is this venv's site-packages (a `.pth` line: the dependencies, without this
checkout's editable `atelier`), so `atelier` is imported from the wheel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a venv with the wheel installed."""
    where = tmp_path_factory.mktemp("wheel")
    scratch = ROOT / "build"  # setuptools' scratch folder in the checkout: removed again if it was not there
    had_scratch = scratch.exists()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(where), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    if not had_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    [wheel] = where.glob("atelier-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True, timeout=120)
    python = where / "venv" / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    zipfile.ZipFile(wheel).extractall(site)
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


# the commands, run in one process of the installed venv (one import of Atelier, not four)
RUN_ALL = """
import contextlib, io, json, sys
import atelier
from atelier.runs.cli import main
out = {"atelier": atelier.__file__}
for args in json.loads(sys.argv[1]):
    sys.argv, said = ["atelier", *args], io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    out[" ".join(args)] = [code, said.getvalue()]
print(json.dumps(out))
"""


@pytest.mark.battery  # ~20 s: a wheel built and a venv made; tests/test_shipped_recipes.py checks the same in-process
def test_the_installed_wheel_finds_shipped_recipes_and_their_relative_paths_from_any_directory(installed, tmp_path):
    (tmp_path / "quickstart").mkdir()  # as `atelier run quickstart --out quickstart` leaves it
    commands = [
        ["recipe", "check", "quickstart"],
        ["recipe", "check", "runs/recipes/quickstart.toml"],
        ["recipe", "check", "papers/pdr_table3_memory"],
        ["recipe", "check", "memory_access_pdr"],
    ]
    done = subprocess.run(
        [str(installed), "-c", RUN_ALL, json.dumps(commands)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said.pop("atelier").startswith(str(installed.parent.parent))  # the wheel's, not this checkout's
    assert said["recipe check quickstart"][0] == 0, said
    code, error = said["recipe check runs/recipes/quickstart.toml"]
    assert code == 2 and "the shipped recipe 'quickstart' is named so" in error
    contexts = tmp_path / "runs" / "out" / "pdr-contexts" / "contexts_en.jsonl"
    for name in ("papers/pdr_table3_memory", "memory_access_pdr"):
        code, error = said[f"recipe check {name}"]
        assert code == 2 and str(contexts) in error, error
        assert "a shipped recipe reads a relative path from the current directory" in error
