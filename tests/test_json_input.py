"""JSON from outside the program: one DataError naming file and line; torn tails of appended files."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import parse_json, read_appended_jsonl, validate_strictly


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 200_000, "nested too deeply"),
        ('{"a": 1,}', "invalid JSON: Expecting property name"),
        (b'{"a": "\xff"}', "not valid UTF-8 at byte 7"),
    ],
)
def test_every_way_of_not_being_json_is_one_data_error(text, message):
    with pytest.raises(DataError, match=message) as caught:
        parse_json(text, file="f.jsonl", line=4)
    assert (caught.value.file, caught.value.line) == ("f.jsonl", 4)


def test_a_torn_last_line_is_dropped_and_cut_on_repair(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2}\n{"n": 3, "te')
    read = read_appended_jsonl(path)
    assert [v for _, v in read.values] == [{"n": 1}, {"n": 2}] and read.torn_line == 3
    assert path.read_bytes().endswith(b'"te')  # untouched without repair
    read_appended_jsonl(path, repair=True)
    assert path.read_bytes() == b'{"n": 1}\n{"n": 2}\n'


def test_a_complete_last_line_without_its_newline_is_kept_and_given_one(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2}')
    read = read_appended_jsonl(path, repair=True)
    assert [v for _, v in read.values] == [{"n": 1}, {"n": 2}] and read.torn_line is None
    assert path.read_bytes() == b'{"n": 1}\n{"n": 2}\n'


def test_a_bad_line_before_the_end_is_an_error_naming_it(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": \n{"n": 3}\n')
    with pytest.raises(DataError, match=r"results.jsonl:2: invalid JSON"):
        read_appended_jsonl(path, repair=True)
    assert path.read_bytes() == b'{"n": 1}\n{"n": \n{"n": 3}\n'


def test_strict_validation_takes_values_as_the_file_spells_them():
    class Settings(BaseModel):
        workers: int = 1
        rate: float = 0.5
        enabled: bool = True

    assert validate_strictly(Settings, {"workers": 3, "rate": 1, "enabled": False}) == Settings(
        workers=3, rate=1.0, enabled=False
    )
    for bad in ({"workers": True}, {"workers": "3"}, {"workers": 2.0}, {"enabled": 1}):
        with pytest.raises(ValidationError):
            validate_strictly(Settings, bad)
