"""No write under a run folder goes through a link at any component (issue 49, finding 4): a link in
place of a folder on the way (`labels/<judge>`, `view/episodes`, `sources/`, a job's system folder)
is refused by name, and its target is left as it was; a dangling link in place of a label file
creates nothing. Above the run folder (where the researcher put it) a link is followed. A judge's
label, which becomes `labels/<label>/`, is one path component."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.sources import SourceStore
from atelier.runs.cli import main
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.studies.label_store import LabelStore
from tests.test_run_folder_links import RECIPE


@pytest.fixture
def run(tmp_path) -> Path:
    """A run folder (it holds its lock file) and, beside it, a folder outside it."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".atelier.lock").write_text("")
    (tmp_path / "outside").mkdir()
    return folder


def test_a_dangling_link_in_place_of_a_label_file_creates_nothing(run, tmp_path):
    (run / "labels" / "lampqa_aspects").mkdir(parents=True)
    (run / "labels" / "lampqa_aspects" / "alice.jsonl").symlink_to(tmp_path / "outside" / "made.jsonl")
    with pytest.raises(no_follow.UnsafeFileError, match="symbolic link"):
        LabelStore(run, "lampqa_aspects", "alice").append({"case": "c", "system": "s", "criterion": "x"})
    assert not (tmp_path / "outside" / "made.jsonl").exists()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda run: LabelStore(run, "lampqa_aspects", "alice").append({"case": "c", "criterion": "x"}),
            id="labels/<judge>",
        ),
        pytest.param(lambda run: SourceStore.for_run(str(run)).put("a page's text"), id="sources"),
        pytest.param(lambda run: write_atomically(run / "view" / "episodes" / "e1.html", "<p>"), id="view/episodes"),
        pytest.param(lambda run: no_follow.make_folders(run / "external" / "sys" / "case"), id="external/<system>"),
    ],
)
def test_a_link_in_place_of_a_folder_under_the_run_folder_is_refused(run, tmp_path, write):
    outside = tmp_path / "outside"
    for linked in ("labels/lampqa_aspects", "sources", "view/episodes", "external/sys"):
        (run / linked).parent.mkdir(parents=True, exist_ok=True)
        (run / linked).symlink_to(outside, target_is_directory=True)
    with pytest.raises(no_follow.UnsafeFileError, match="is a symbolic link, not a regular file") as refused:
        write(run)
    assert str(run) in str(refused.value)
    assert list(outside.iterdir()) == []  # nothing was written through it


def test_a_link_above_the_run_folder_is_followed(tmp_path):
    real = tmp_path / "disk"
    (real / "run").mkdir(parents=True)
    (real / "run" / ".atelier.lock").write_text("")
    (tmp_path / "runs").symlink_to(real, target_is_directory=True)  # where the researcher keeps runs
    write_atomically(tmp_path / "runs" / "run" / "labels" / "j" / "a.json", "{}")
    assert (real / "run" / "labels" / "j" / "a.json").read_text() == "{}"


def test_view_static_into_the_run_folder_refuses_a_linked_episodes_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "recipe.toml").write_text(RECIPE)
    monkeypatch.setattr(sys, "argv", ["atelier", "run", str(tmp_path / "recipe.toml"), "--no-progress",
                                      "--out", str(tmp_path / "run")])  # fmt: skip
    with pytest.raises(SystemExit):
        main()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "run" / "view").mkdir()
    (tmp_path / "run" / "view" / "episodes").symlink_to(outside, target_is_directory=True)
    monkeypatch.setattr(sys, "argv", ["atelier", "view", str(tmp_path / "run"), "--static",
                                      str(tmp_path / "run" / "view")])  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "episodes" in err and "symbolic link" in err, err
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("label", ["../../../x", "a/b", "..", "x\\y", "gpt-r\u0435searcher"])
def test_a_judge_label_is_one_visible_path_component(tmp_path, label):
    with pytest.raises(ConfigError, match=r"judges\[0\]"):
        parse_recipe(
            {
                "name": "t",
                "benchmark": {"name": "sample"},
                "systems": [{"name": "s", "memory": {"backend": "none"}}],
                "judges": [{"name": "lampqa_aspects", "label": label}],
                "run": {"out_dir": str(tmp_path)},
            }
        )
    assert not any(p.name == "x" for p in Path(os.sep).iterdir())
