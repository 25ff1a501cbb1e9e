"""`benchmarks.common.atomic_files`: the one way cache and run files are (re)written."""

from __future__ import annotations

import os
import stat

import pytest

from atelier.benchmarks.common.atomic_files import atomic_writer, write_atomically, write_if_absent


def test_writes_bytes_and_text_into_new_folders_and_replaces_what_was_there(tmp_path):
    target = tmp_path / "a" / "b" / "file.json"
    write_atomically(target, b"\x00old")
    assert target.read_bytes() == b"\x00old"
    write_atomically(str(target), "névé\n")
    assert target.read_bytes() == "névé\n".encode()
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.json"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_writer(target) as out:
            out.write(b"half of the new")
            [temporary] = [p for p in tmp_path.iterdir() if p.name != "summary.json"]
            assert temporary.name.startswith(".")  # hidden while half-written: listings skip it
            raise RuntimeError("disk on fire")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_permissions_follow_the_umask_as_open_does(tmp_path):
    previous = os.umask(0o022)
    try:
        write_atomically(tmp_path / "shared.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "shared.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644


def test_a_write_once_file_already_there_is_left_as_it_is(tmp_path):
    target = tmp_path / "blobs" / "ab12"
    write_if_absent(target, b"first")
    write_if_absent(target, b"second")
    assert target.read_bytes() == b"first"
