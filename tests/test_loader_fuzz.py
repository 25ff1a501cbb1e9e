"""Property-based fuzzing of the loaders (hypothesis): corrupted copies of real data files must fail
with exactly one DataError (or load fine when the mutation happens to be harmless) — never with
any other exception.

Each target copies real files (trimmed where large, so one example loads in milliseconds) into a
temporary data directory, mutates one of them — truncation, byte flips, a deleted key, a value of
the wrong type — and loads the benchmark from there.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.data_files import ENV_DATA_DIR, data_dir
from atelier.benchmarks.registry import load_cases

FIXTURES = Path(__file__).parent / "fixtures"
LAMPQA = FIXTURES / "lampqa" / "Lifestyle_and_Personal_Development_test.jsonl"
WRONG_TYPE_VALUES = [17, -1, 2.5, "x", "", None, True, [], {}, ["a"], {"k": 1}]


def _first_lines(n: int) -> Callable[[bytes, bool], bytes]:
    def trim(raw: bytes, gz: bool) -> bytes:
        text = gzip.decompress(raw) if gz else raw
        kept = b"\n".join(text.splitlines()[:n]) + b"\n"
        return gzip.compress(kept, mtime=0) if gz else kept

    return trim


def _first_items(n: int) -> Callable[[bytes, bool], bytes]:
    return lambda raw, gz: json.dumps(json.loads(raw)[:n]).encode()


def _qrels_for(topics: tuple[str, ...]) -> Callable[[bytes, bool], bytes]:
    return lambda raw, gz: (
        b"\n".join(line for line in raw.splitlines() if line.split(b"_")[0].decode() in topics) + b"\n"
    )


@dataclass(frozen=True)
class Target:
    benchmark: str
    files: dict[str, Callable[[bytes, bool], bytes] | None]  # relpath in the data dir -> trimmer
    split: str | None = None
    setting: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # "{tmp}" is replaced by the temp dir
    external: dict[str, Path] = field(default_factory=dict)  # relpath in tmp -> fixture to copy


TARGETS = {
    "pdr": Target(
        "pdr",
        {
            "pdr_bench/tasks_en.jsonl.gz": None,
            "pdr_bench/personas_en.jsonl.gz": None,
            "pdr_bench/queries250_en.jsonl.gz": _first_lines(25),
        },
    ),
    "pdr_contexts": Target(
        "pdr",
        {
            "pdr_bench/tasks_en.jsonl.gz": None,
            "pdr_bench/personas_en.jsonl.gz": None,
            "pdr_bench/queries250_en.jsonl.gz": _first_lines(10),
        },
        setting="context",
        options={"contexts_file": "{tmp}/contexts_en.jsonl"},
        external={"contexts_en.jsonl": FIXTURES / "pdr_contexts" / "contexts_en.jsonl"},
    ),
    "ikat_2023_train": Target("ikat", {"ikat/2023_train_topics.json": None}, split="2023_train"),
    "ikat_nist": Target(
        "ikat",
        {"ikat/2023_test_topics.json": _first_items(3), "ikat/ptkb_rel_nist": _qrels_for(("9-1", "9-2", "10-1"))},
        split="2023_test",
        options={"qrels": "nist"},
    ),
    "ikat_2025": Target(
        "ikat",
        {},
        split="2025_test",
        options={"topics_file": "{tmp}/2025_test_topics.json"},
        external={"2025_test_topics.json": FIXTURES / "ikat2025" / "2025_test_topics.json"},
    ),
    "locomo": Target("locomo", {"locomo/locomo10.json": _first_items(1)}),
    "prefeval_explicit": Target(
        "prefeval", {"prefeval/explicit_preference/travel_hotel.json": None}, split="travel_hotel", setting="explicit"
    ),
    "prefeval_choice": Target(
        "prefeval",
        {"prefeval/implicit_choice_based/travel_hotel.json": _first_items(15)},
        split="travel_hotel",
        setting="implicit_choice",
    ),
    "prefeval_persona": Target(
        "prefeval",
        {"prefeval/implicit_persona_driven/travel_hotel.json": _first_items(10)},
        split="travel_hotel",
        setting="implicit_persona",
    ),
    "drb": Target(
        "drb",
        {"deep_research_bench/query.jsonl": _first_lines(100), "deep_research_bench/criteria.jsonl": _first_lines(100)},
        options={"language": "all"},
    ),
    "lampqa": Target(
        "lampqa",
        {},
        options={"data_file": "{tmp}/lampqa.jsonl"},
        external={"lampqa.jsonl": LAMPQA},
    ),
    "bespoke": Target(
        "bespoke",
        {},
        options={"data_dir": "{tmp}/bespoke"},
        external={
            f"bespoke/{p.relative_to(FIXTURES / 'bespoke')}": p for p in sorted((FIXTURES / "bespoke").rglob("*.jsonl"))
        },
    ),
}


# --------------------------------------------------------------------------- mutations


def _slots(node: Any) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((node, key))
            out.extend(_slots(value))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.append((node, i))
            out.extend(_slots(value))
    return out


def _mutate_json(doc: Any, kind: str, data: st.DataObject) -> Any:
    slots = _slots(doc)
    if kind == "delete_key":
        slots = [(c, k) for c, k in slots if isinstance(c, dict)]
    if not slots:
        return doc
    container, key = slots[data.draw(st.integers(0, len(slots) - 1), label="slot")]
    if kind == "delete_key":
        del container[key]
    else:
        current = container[key]
        choices = [v for v in WRONG_TYPE_VALUES if type(v) is not type(current)]
        container[key] = data.draw(st.sampled_from(choices), label="value")
    return doc


def mutate(relpath: str, raw: bytes, kind: str, data: st.DataObject) -> bytes:
    if kind == "truncate":
        return raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)), label="cut")]
    if kind == "flip":
        out = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            pos = data.draw(st.integers(0, len(out) - 1), label="pos")
            out[pos] ^= data.draw(st.integers(1, 255), label="xor")
        return bytes(out)
    gz = relpath.endswith(".gz")
    text = (gzip.decompress(raw) if gz else raw).decode()
    if relpath.endswith((".jsonl", ".jsonl.gz")):
        lines = text.rstrip("\n").split("\n")  # as the loaders split: a U+2028 in a string is no line end
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = json.dumps(_mutate_json(json.loads(lines[i]), kind, data), ensure_ascii=False)
        text = "\n".join(lines) + "\n"
    elif relpath.endswith(".json"):
        text = json.dumps(_mutate_json(json.loads(text), kind, data), ensure_ascii=False)
    else:  # whitespace-separated qrels: drop or replace one token
        tokens = text.split(" ")
        i = data.draw(st.integers(0, len(tokens) - 1), label="token")
        tokens[i] = (
            "" if kind == "delete_key" else data.draw(st.sampled_from(["x", "-3", "1.5", "9-9_9"]), label="token value")
        )
        text = " ".join(tokens)
    encoded = text.encode()
    return gzip.compress(encoded, mtime=0) if gz else encoded


def build_tree(target: Target, root: Path) -> list[str]:
    source = data_dir()
    assert source is not None, "the real data directory is needed (ATELIER_DATA_DIR or ../shared/data)"
    for relpath, trim in target.files.items():
        raw = (source / relpath).read_bytes()
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_bytes(trim(raw, relpath.endswith(".gz")) if trim else raw)
    for relpath, fixture in target.external.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fixture, root / relpath)
    return list(target.files) + list(target.external)


def run_target(target: Target, root: Path) -> list[Case]:
    options = {k: v.replace("{tmp}", str(root)) if isinstance(v, str) else v for k, v in target.options.items()}
    previous = os.environ.get(ENV_DATA_DIR)
    os.environ[ENV_DATA_DIR] = str(root)
    try:
        return load_cases(target.benchmark, split=target.split, setting=target.setting, options=options)
    finally:
        if previous is None:
            del os.environ[ENV_DATA_DIR]
        else:
            os.environ[ENV_DATA_DIR] = previous


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_unmutated_copies_load(name):
    with tempfile.TemporaryDirectory() as tmp:
        build_tree(TARGETS[name], Path(tmp))
        assert run_target(TARGETS[name], Path(tmp))


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_copies_raise_only_data_errors(name, data):
    target = TARGETS[name]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = build_tree(target, root)
        relpath = data.draw(st.sampled_from(files), label="file")
        kind = data.draw(st.sampled_from(["truncate", "flip", "delete_key", "wrong_type"]), label="mutation")
        path = root / relpath
        path.write_bytes(mutate(relpath, path.read_bytes(), kind, data))
        try:
            cases = run_target(target, root)
        except DataError as exc:
            assert exc.file, f"a DataError must name the file: {exc}"
            event(f"{kind}: DataError")
            return
        event(f"{kind}: loaded")
        assert all(isinstance(c, Case) for c in cases)


# --------------------------------------------------------------------------- line breaks inside strings

# what str.splitlines() splits at that json.dumps(..., ensure_ascii=False) writes raw inside a
# string: a loader that split lines with it would cut such a record apart
LINE_BREAKS_IN_STRINGS = ["\u2028", "\u2029", "\x85"]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(breaks=st.lists(st.sampled_from(LINE_BREAKS_IN_STRINGS), min_size=1, max_size=4), crlf=st.booleans())
def test_a_record_with_unicode_line_breaks_in_its_strings_loads_intact(breaks, crlf):
    """Whether the file's lines end in "\n" or "\r\n"."""
    question = "Which trail" + "".join(f"{b}part {i}" for i, b in enumerate(breaks)) + "?"
    records = [json.loads(line) for line in LAMPQA.read_text(encoding="utf-8").split("\n")[:2]]
    records[0]["question"] = question
    records[1]["profile"][0]["text"] = question
    newline = "\r\n" if crlf else "\n"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lampqa.jsonl").write_bytes(
            "".join(json.dumps(r, ensure_ascii=False) + newline for r in records).encode()
        )
        cases = run_target(TARGETS["lampqa"], Path(tmp))
    assert len(cases) == 2
    assert cases[0].query.text == question
    assert cases[1].history[0].question == question


def test_a_bad_record_after_unicode_line_breaks_is_reported_at_its_own_line(tmp_path):
    from atelier.benchmarks.loaders._records import RawRecord, read_jsonl

    class Line(RawRecord):
        text: str

    path = tmp_path / "lines.jsonl"
    path.write_text('{"text": "a\u2028b\x85c\u2029d"}\r\n{"text": "e"}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_jsonl(path, Line)
    assert (info.value.line, info.value.field) == (3, "text")
    path.write_text('{"text": "a\u2028b\x85c\u2029d"}\r\n{"text": "e"}\n', encoding="utf-8")
    assert [r.text for r in read_jsonl(path, Line)] == ["a\u2028b\x85c\u2029d", "e"]
