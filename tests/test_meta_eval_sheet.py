"""`atelier meta-eval sheet`: a labelling sheet written from a real (scripted) run, filled in, saved
back the way spreadsheets save, and read by `atelier meta-eval` — with the agreement it yields
checked against figures worked out by hand from the run's scores."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.runs.cli import judges as judges_cli
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from atelier.runs.studies.meta_eval import SHEET_COLUMNS, read_labels, run_scores

BESPOKE = ("need_alignment", "content_depth", "tone", "explanation_style", "recall")


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    judges_cli.register(app, typer.Typer())
    return app


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Two sample cases x two systems, judged by BESPOKE and by PQR (P and Q) on the scripted model."""
    root = tmp_path_factory.mktemp("sheet")
    recipe = parse_recipe(
        {
            "name": "sheet",
            "benchmark": {"name": "sample", "limit": 2},
            "systems": [
                {"name": "none", "memory": {"backend": "none"}},
                {"name": "full", "memory": {"backend": "full"}},
            ],
            "judges": [{"name": "bespoke"}, {"name": "pqr", "axes": ["P", "Q"]}],
            "run": {"out_dir": str(root)},
        }
    )
    return run_recipe(recipe, root / "run", progress=False).path


def sheet_rows(path: Path) -> list[dict[str, str]]:
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")  # a byte-order mark: spreadsheets open it as UTF-8
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))


def write_rows(
    path: Path,
    rows: list[dict[str, str]],
    columns=SHEET_COLUMNS,
    delimiter: str = ",",
    line_end: str = "\r\n",
    bom: bool = True,
) -> Path:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, columns, delimiter=delimiter, lineterminator=line_end, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(("\ufeff" if bom else "") + buffer.getvalue(), encoding="utf-8", newline="")
    return path


def pca_by_hand(model: dict, human: dict) -> float:
    """Appendix C: over the pairs of responses to the same case, the share whose preference signs match."""
    cases = sorted({case for case, _ in model})
    outcomes = []
    for case in cases:
        systems = sorted(s for c, s in model if c == case)
        for i, a in enumerate(systems):
            for b in systems[i + 1 :]:
                sign = lambda x: (x > 0) - (x < 0)
                outcomes.append(sign(model[case, a] - model[case, b]) == sign(human[case, a] - human[case, b]))
    return sum(outcomes) / len(outcomes)


def test_sheet_round_trip_gives_hand_worked_agreement(run_dir, tmp_path, cli) -> None:
    sheet = tmp_path / "sheet.csv"
    several = CliRunner().invoke(cli, ["meta-eval", "sheet", str(run_dir), "--out", str(sheet)])
    assert isinstance(several.exception, ConfigError) and "name one with --judge" in str(several.exception)

    done = CliRunner().invoke(cli, ["meta-eval", "sheet", str(run_dir), "--judge", "bespoke", "--out", str(sheet)])
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)
    assert (summary["rows"], summary["responses"], summary["criteria"]) == (2 * 2 * 5, 4, list(BESPOKE))
    assert summary["cases_without_query"] == [] and summary["responses_over_cell_limit"] == 0

    rows = sheet_rows(sheet)
    assert tuple(rows[0]) == SHEET_COLUMNS  # no column carries the judge's own scores: labelling is blind
    records = {
        (r["case_id"], r["system"]): r
        for r in (json.loads(line) for line in (run_dir / "results.jsonl").read_text().split("\n") if line)
    }
    for row in rows:
        assert row["label"] == "" and row["feedback"] == ""
        assert row["response"].lstrip("'") == records[(row["case_id"], row["system"])]["response"]["text"]
        assert row["query"] and row["persona"].startswith("{")
        assert row["scale"] == ("0-1" if row["criterion"] == "recall" else "1-5")
    tone_row = next(r for r in rows if r["criterion"] == "tone")
    assert tone_row["description"].startswith("Tone: 1 uncomfortable or offensive to the user;")

    # Fill it in: tone as the judge scored it, need alignment mirrored (6 - score), content depth 3
    # everywhere; explanation style and recall left empty.
    judged = run_scores(run_dir, "bespoke").scores
    model = {name: {(c, s): judged[(c, s, name)].score for c, s in records} for name in BESPOKE}
    fill = {"tone": lambda m: m, "need_alignment": lambda m: 6 - m, "content_depth": lambda m: 3}
    for row in rows:
        if row["criterion"] in fill:
            row["label"] = f"{fill[row['criterion']](model[row['criterion']][(row['case_id'], row['system'])]):g}"
    write_rows(sheet, rows)

    result = CliRunner().invoke(cli, ["meta-eval", str(run_dir), "--judge", "bespoke", "--labels", str(sheet)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["labels"] | {"file": None} == {
        "file": None,
        "format": "csv",
        "read": 12,
        "unlabelled_rows": 8,
        "matched": 12,
        "not_selected": 0,
        "unmatched": 0,
        "unmatched_by_reason": {},
    }
    assert list(report["criteria"]) == ["content_depth", "need_alignment", "tone"]
    tone, need, depth = (report["criteria"][name] for name in ("tone", "need_alignment", "content_depth"))
    labels = {name: {key: fill[name](value) for key, value in model[name].items()} for name in fill}

    assert (tone["n"], tone["n_pairs"], tone["mard"], tone["pca"]) == (4, 2, 0.0, 1.0)
    assert need["mard"] == pytest.approx(sum(abs(2 * m - 6) for m in model["need_alignment"].values()) / 4)
    assert need["pca"] == pca_by_hand(model["need_alignment"], labels["need_alignment"])
    assert depth["mard"] == pytest.approx(sum(abs(m - 3) for m in model["content_depth"].values()) / 4)
    assert depth["pca"] == pca_by_hand(model["content_depth"], labels["content_depth"])
    assert depth["pearson"]["statistic"] is None  # constant labels: undefined, not 0
    # mirrored and identical labels: -1 and +1 wherever the judge's scores vary
    varied = lambda name: len(set(model[name].values())) > 1
    assert need["pearson"]["statistic"] == (pytest.approx(-1.0) if varied("need_alignment") else None)
    assert tone["pearson"]["statistic"] == (pytest.approx(1.0) if varied("tone") else None)
    average = report["average"]
    assert average["criteria"] == ["content_depth", "need_alignment", "tone"]
    assert average["pca"] == pytest.approx((tone["pca"] + need["pca"] + depth["pca"]) / 3)
    assert "content_depth" in average["undefined"]["pearson"]
    defined = [c["pearson"]["statistic"] for c in (tone, need) if c["pearson"]["statistic"] is not None]
    assert average["pearson"] == (pytest.approx(sum(defined) / len(defined)) if defined else None)

    # The same sheet after a spreadsheet in a comma-decimal locale saved it: semicolons, columns
    # moved, a column added, blank rows, padded cells, a decimal comma, no byte-order mark.
    moved = ("label", "notes", *[c for c in SHEET_COLUMNS if c != "label"])
    european = [
        {
            **row,
            "case_id": f" {row['case_id']} ",
            "notes": "seen",
            "label": row["label"].replace(".", ",") + (",0" if row["label"].isdigit() else ""),
        }
        for row in rows
    ]
    saved = write_rows(
        tmp_path / "saved.csv", european[:5] + [{}] + european[5:], columns=moved, delimiter=";", bom=False
    )
    assert saved.read_text().startswith("label;notes;case_id;") and "3,0;seen; q" in saved.read_text()
    again = CliRunner().invoke(cli, ["meta-eval", str(run_dir), "--judge", "bespoke", "--labels", str(saved)])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["criteria"] == report["criteria"]


def test_pqr_sheet_rows_are_sub_criteria_checked_by_wording(run_dir, tmp_path, cli) -> None:
    sheet = tmp_path / "pqr.csv"
    done = CliRunner().invoke(cli, ["meta-eval", "sheet", str(run_dir), "--judge", "pqr", "--out", str(sheet)])
    assert done.exit_code == 0, done.output
    rows = sheet_rows(sheet)
    judged = run_scores(run_dir, "pqr").scores
    subs = {key: s for key, s in judged.items() if s.dimension}
    assert len(rows) == len(subs) and json.loads(done.stdout)["criteria"] == [
        f"{code}-*" for code in ("GOAL", "CONT", "PRES", "ACTI", "DEIN", "LOGC", "CLAR")
    ]
    for row in rows:
        score = subs[(row["case_id"], row["system"], row["criterion"])]
        assert row["scale"] == "0-10" and row["criterion_text"] == score.text
        assert f"({score.dimension}): " in row["description"] and f"Criterion: {score.text}" in row["description"]
        row["label"] = f"{score.score:g}"  # the judge's own scores: perfect agreement
    first = rows[0]
    first["criterion_text"] = "a criterion generated anew"
    write_rows(sheet, rows)

    report = json.loads(
        CliRunner().invoke(cli, ["meta-eval", str(run_dir), "--judge", "pqr", "--labels", str(sheet)]).stdout
    )
    assert report["labels"]["unmatched_by_reason"] == {"different_wording": 1}
    assert report["unmatched"][0] | {"line": None} == {
        "line": None,
        "case_id": first["case_id"],
        "system": first["system"],
        "criterion": first["criterion"],
        "reason": "different_wording",
    }
    assert report["criteria"] == {} and report["average"] is None  # no dimension score was labelled
    everything = report["sub_criteria"]["all"]
    assert (everything["n"], everything["pca"], everything["mard"]) == (len(subs) - 1, 1.0, 0.0)
    assert set(report["sub_criteria"]["dimensions"]) == {"GOAL", "CONT", "PRES", "ACTI", "DEIN", "LOGC", "CLAR"}
    assert report["sub_criteria"]["dimension_average"]["pca"] == 1.0

    only = CliRunner().invoke(
        cli,
        [
            "meta-eval",
            "sheet",
            str(run_dir),
            "--judge",
            "pqr",
            "--criterion",
            "GOAL",
            "--out",
            str(tmp_path / "goal.csv"),
        ],
    )
    assert only.exit_code == 0, only.output
    assert {r["criterion"].split("-")[0] for r in sheet_rows(tmp_path / "goal.csv")} == {"GOAL"}


def test_an_empty_sheet_says_so(run_dir, tmp_path, cli) -> None:
    sheet = tmp_path / "sheet.csv"
    CliRunner().invoke(cli, ["meta-eval", "sheet", str(run_dir), "--judge", "bespoke", "--out", str(sheet)])
    with pytest.raises(DataError, match=r"sheet.csv: no labels in the file \(20 rows have an empty label\)"):
        read_labels(sheet)


HEADER = "case_id,system,criterion,scale,label,response\r\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # the second row starts on line 4: the first row's response spans lines 2-3
        ('q1,a,tone,1-5,4,"two\r\nlines"\r\nq1,b,tone,1-5,five,x\r\n', ":4: column 'label': 'five' is not a number"),
        ("q1,a,tone,1-5,7,x\r\n", ":2: column 'label': 7 is outside the criterion's scale 1-5"),
        ("q1,a,tone,1-5,nan,x\r\n", ":2: column 'label': 'nan' is not a finite number"),
        ("q1,,tone,1-5,4,x\r\n", ":2: column 'system' is empty"),
    ],
)
def test_a_bad_row_names_the_file_line_and_column(tmp_path, body, message) -> None:
    sheet = tmp_path / "sheet.csv"
    sheet.write_text(HEADER + body, encoding="utf-8", newline="")
    with pytest.raises(DataError) as caught:
        read_labels(sheet)
    assert str(caught.value) == f"{sheet}{message}"


def test_sheet_header_and_encoding_errors(tmp_path) -> None:
    sheet = tmp_path / "sheet.csv"
    sheet.write_text("\n\ncase_id;system;criterion;grade\nq1;a;tone;4\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_labels(sheet)
    assert str(caught.value) == (
        f"{sheet}:3: the sheet's header lacks column(s) 'label' (it has: 'case_id', 'system', 'criterion', 'grade')"
    )
    sheet.write_bytes(HEADER.encode() + "q1,a,tone,1-5,4,caf\u00e9\r\n".encode("cp1252"))
    with pytest.raises(DataError, match=r"sheet.csv:2: not UTF-8 text \(byte 0xe9\); save the sheet as \"CSV UTF-8\""):
        read_labels(sheet)


def test_a_decimal_comma_and_a_score_column_are_read(tmp_path) -> None:
    sheet = tmp_path / "labels.csv"
    sheet.write_text(
        "Case_ID\tSystem\tCriterion\tScore\tfeedback\nq1\ta\ttone\t3,5\t'- too formal\nq1\tb\ttone\t\t\n",
        encoding="utf-8",
    )
    read = read_labels(sheet)
    assert [(lb.case_id, lb.system, lb.criterion, lb.score, lb.feedback) for lb in read.labels] == [
        ("q1", "a", "tone", 3.5, "- too formal")
    ]  # the formula guard "'" taken off again
    assert read.unlabelled_rows == 1 and read.format == "csv"


def test_text_a_spreadsheet_would_run_as_a_formula_is_guarded(tmp_path) -> None:
    from atelier.runs.studies.meta_eval import _escaped, _unescaped

    for text in ("=SUM(A1)", "- a bullet", "+1", "@home"):
        assert _escaped(text) == "'" + text and _unescaped(_escaped(text)) == text
    assert _escaped("plain") == "plain" and _unescaped("'quoted") == "'quoted"


def test_sheet_refusals_name_what_is_wrong(run_dir, tmp_path, cli) -> None:
    from atelier.runs.studies.meta_eval import write_sheet

    with pytest.raises(ConfigError, match=r"no judgment by 'nobody' in .* \(judges there: bespoke, pqr\)"):
        write_sheet(run_dir, tmp_path / "s.csv", judge="nobody")
    with pytest.raises(ConfigError, match="judge 'bespoke' in .* scored no response on tnoe"):
        write_sheet(run_dir, tmp_path / "s.csv", judge="bespoke", criteria=["tnoe"])
    with pytest.raises(DataError, match=r"missing/s.csv: cannot write the sheet: No such file or directory"):
        write_sheet(run_dir, tmp_path / "missing" / "s.csv", judge="bespoke")
    assert write_sheet(run_dir, tmp_path / "s.csv", judge="bespoke", criteria=["tone"]).rows == 4
    empty = tmp_path / "empty.csv"
    empty.write_text("\r\n\r\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"empty.csv: the sheet is empty \(no header row\)"):
        read_labels(empty)
