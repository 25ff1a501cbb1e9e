"""Every file and folder Atelier writes goes through `benchmarks/common/no_follow.py` (and the atomic
writer built on it), which never follows a link below a run folder, at any component.

The check walks the code base's syntax trees for any other way to write: `open()` or `Path.open()`
in a writing mode, `write_text` / `write_bytes`, `mkdir` / `makedirs`, `os.open` with a writing
flag, `os.replace` / `rename` / `symlink` / `link`, `shutil` copies and moves, `tempfile` files and
folders. A few writers are not the project's own files, each named below with why (the job's side
of an external agent, which writes only inside its own boundary). A new writer fails this test
until it uses the helper; a planted one shows the check catches it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("agents", "benchmarks", "graphs", "memory", "tools", "runs")
HELPERS = {"benchmarks/common/no_follow.py", "benchmarks/common/atomic_files.py"}
# code that runs inside an external agent's job, in the agent's interpreter (standard library only):
# it writes the job's own files, inside the job's boundary, where the run folder is not in sight: the
# child, and the command-agent wrappers (OAgents, MiroFlow) a job runs as its command
JOB_SIDE = ("graphs/external/child/", "graphs/external/wrappers/")
# (module, the call as written) -> why it is not a write of the project's files through a path
ALLOWED = {
    ("graphs/external/launcher.py", "os.open"): "the relay's own 0700 temporary folder: O_EXCL | O_NOFOLLOW",
    ("agents/judges/store.py", "os.link"): "a hard link inside a folder opened by no_follow.folder_fd (dir_fd)",
    ("benchmarks/download.py", "tempfile.TemporaryDirectory"): "a download's own folder beside its destination",
    ("benchmarks/download.py", "os.replace"): "a verified download moved from its own folder into the data folder",
}
WRITING_MODE = set("wax+")
WRITING_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
ATTRIBUTE_WRITERS = {"write_text", "write_bytes", "mkdir", "makedirs", "symlink_to", "hardlink_to", "touch"}
MODULE_WRITERS = {
    "os": {"mkdir", "makedirs", "replace", "rename", "renames", "symlink", "link", "mkfifo"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory", "TemporaryFile"},
}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode argument (positional `position` or `mode=`) if a constant; "?" if not constant."""
    node = call.args[position] if len(call.args) > position else None
    node = next((k.value for k in call.keywords if k.arg == "mode"), node)
    if node is None:
        return None
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def writers(source: str, module: str) -> list[str]:
    """Each call in `source` that writes a file or a folder other than through the helper."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        what = None
        if name == "open":
            mode = _mode(node, 1)
            if mode is not None and (mode == "?" or WRITING_MODE & set(mode)):
                what = f"open(..., {mode!r})"
        elif isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, _dotted(node.func.value)
            if attr == "open" and owner == "os":
                flags = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(node)}
                if flags & WRITING_FLAGS:
                    what = "os.open"
            elif attr == "open":  # Path.open: its mode comes first (another object's first argument is a name)
                mode = _mode(node, 0)
                if mode not in (None, "?") and WRITING_MODE & set(mode):
                    what = f".open({mode!r})"
            elif attr in MODULE_WRITERS.get(owner, ()):
                # a temporary file or folder of the system's (no `dir=`) is nobody's folder
                if owner != "tempfile" or any(k.arg == "dir" for k in node.keywords):
                    what = f"{owner}.{attr}"
            elif attr in ATTRIBUTE_WRITERS and owner not in MODULE_WRITERS:
                what = f".{attr}()"
        if what is not None and (module, what) not in ALLOWED:
            found.append(f"{module}:{node.lineno}: {what}")
    return found


def project_writers() -> list[str]:
    found = []
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            module = path.relative_to(ROOT).as_posix()
            if module in HELPERS or module.startswith(JOB_SIDE):
                continue
            found += writers(path.read_text(encoding="utf-8"), module)
    return found


def test_every_writer_of_the_code_base_goes_through_the_no_follow_helper():
    assert project_writers() == []


@pytest.mark.parametrize(
    "planted",
    [
        "def save(run):\n    with open(run / 'labels' / 'alice.jsonl', 'a') as fh:\n        fh.write('x')\n",
        "def save(run):\n    (run / 'view' / 'episodes').mkdir(parents=True, exist_ok=True)\n",
        "def save(run, text):\n    (run / 'report.html').write_text(text)\n",
        "import os\ndef save(run):\n    os.open(run / 'x', os.O_WRONLY | os.O_CREAT)\n",
        "def save(path, mode):\n    return open(path, mode)\n",
        "import tempfile\ndef save(run):\n    return tempfile.mkstemp(dir=run)\n",
        "import shutil\ndef save(a, b):\n    shutil.copy(a, b)\n",
    ],
)
def test_a_planted_writer_fails_the_check(planted):
    assert len(writers(planted, "runs/planted.py")) == 1
