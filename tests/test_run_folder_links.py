"""A run folder's files are never opened through a link (issue 42, item 3): a symbolic link planted in
place of the lock, config.json, the results, the ledger or the checkpoints makes `atelier run` exit 2 in one
line naming the file, with the link's target untouched (and, for a dangling link, never created); a
file written whole (summary.json, report.html) replaces a link rather than writing
through it. A FIFO in the lock's place is refused by name too."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from atelier.runs.cli import main

RECIPE = """name = "links"
[benchmark]
name = "sample"
limit = 1
[models.system]
model = "scripted"
[models.judge]
model = "scripted"
[[systems]]
name = "direct-none"
memory = { backend = "none" }
[[judges]]
name = "lampqa_aspects"
"""
OUTSIDE_TEXT = "a file outside the run folder\n"


def atelier(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["atelier", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    return exited.value.code or 0, capsys.readouterr().err


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "recipe.toml").write_text(RECIPE)
    return tmp_path / "run"


@pytest.mark.parametrize(
    "name", [".atelier.lock", "config.json", "results.jsonl", "ledger.jsonl", "checkpoints.sqlite"]
)
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_link_in_place_of_a_run_file_is_refused_and_its_target_untouched(
    folder, tmp_path, capsys, monkeypatch, name, dangling
):
    folder.mkdir()
    outside = tmp_path / "outside" / "target"
    outside.parent.mkdir()
    if not dangling:
        outside.write_text(OUTSIDE_TEXT)
    (folder / name).symlink_to(outside)
    code, err = atelier(
        capsys, monkeypatch, "run", str(tmp_path / "recipe.toml"), "--no-progress", "--out", str(folder)
    )
    assert code == 2, err
    assert [line for line in err.splitlines() if line.startswith("error")] == [
        f"error: {folder / name}: is a symbolic link, not a regular file; Atelier never opens a run folder's "
        "files through one: remove it"
    ]
    if dangling:
        assert not outside.exists()
    else:
        assert outside.read_text() == OUTSIDE_TEXT
    assert (folder / name).is_symlink()


@pytest.mark.parametrize("name", ["summary.json", "report.html"])
def test_a_file_written_whole_replaces_a_link_and_leaves_its_target_alone(folder, tmp_path, capsys, monkeypatch, name):
    folder.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text(OUTSIDE_TEXT)
    (folder / name).symlink_to(outside)
    code, err = atelier(
        capsys, monkeypatch, "run", str(tmp_path / "recipe.toml"), "--no-progress", "--out", str(folder)
    )
    assert code in (0, 3), err  # 3: a dry run on the scripted model may degrade
    assert outside.read_text() == OUTSIDE_TEXT
    assert not (folder / name).is_symlink() and (folder / name).stat().st_size > 0


def test_a_fifo_in_place_of_the_lock_is_named(folder, tmp_path, capsys, monkeypatch):
    folder.mkdir()
    os.mkfifo(folder / ".atelier.lock")
    code, err = atelier(
        capsys, monkeypatch, "run", str(tmp_path / "recipe.toml"), "--no-progress", "--out", str(folder)
    )
    assert code == 2
    assert err.strip() == (
        f"error: {folder / '.atelier.lock'}: is a FIFO, not a regular file; Atelier never opens a run folder's "
        "files through one: remove it"
    )


def test_no_follow_opens_regular_files_and_refuses_links_fifos_and_folders(tmp_path):
    from atelier.benchmarks.common import no_follow

    regular = tmp_path / "regular"
    regular.write_text("text")
    assert no_follow.read_text(regular) == "text"
    with no_follow.open_file(tmp_path / "new", "a") as fh:
        fh.write("appended")
    assert (tmp_path / "new").read_text() == "appended"
    (tmp_path / "link").symlink_to(regular)
    os.mkfifo(tmp_path / "fifo")
    for path, what in ((tmp_path / "link", "a symbolic link"), (tmp_path / "fifo", "a FIFO"), (tmp_path, "a folder")):
        with pytest.raises(no_follow.UnsafeFileError, match=f"is {what}, not a regular file"):
            no_follow.read_text(path)
    with pytest.raises(no_follow.UnsafeFileError):
        no_follow.refuse_links(*no_follow.sqlite_files(tmp_path / "link"))
    no_follow.refuse_links(*no_follow.sqlite_files(regular))
    assert Path(tmp_path / "regular").read_text() == "text"
