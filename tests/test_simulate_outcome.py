"""`atelier simulate history|check` end like `atelier run`: exit 3 when a user failed, is incomplete
(or breaks the protocol), the counts and the most common reasons on stderr, and what was written
kept — a partial user included; the same `--out` continues a history rather than starting over."""

from __future__ import annotations

import json

import pytest

from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK
from tests.cli_in_process import cli  # noqa: F401 (a fixture)
from tests.test_cli_e2e import env, lines  # noqa: F401 (env: the CLI tests' fixture)


def test_a_history_where_every_user_failed_exits_3_with_the_reason(cli, tmp_path, env):
    out = tmp_path / "h"
    done = cli(
        "simulate",
        "history",
        "--users",
        "User2",
        "--out",
        str(out),
        "--model",
        "scripted?error_rate=1",
        "--max-retries",
        "0",
        "--no-progress",
        env=env,
    )
    assert done.returncode == EXIT_FAILURES, done.stderr
    stderr = done.stderr.splitlines()
    assert "users: 0 within the protocol, 1 failed (of 1)" in stderr
    assert stderr[stderr.index("most common user failures:") + 1].startswith(
        "  1 x no item written: failed: history_writer model scripted?error_rate=1 failed: "
    )
    start = stderr.index("most common reasons items are missing:") + 1
    missing = stderr[start : start + 3]  # by the error (429, 500, 503): every item of the plan
    assert all(
        m.startswith("  ") and " x failed: history_writer model scripted?error_rate=1 failed: " in m for m in missing
    )
    assert sum(int(m.split(" x ")[0]) for m in missing) == 126
    assert "Traceback" not in done.stderr and "never awaited" not in done.stderr
    assert json.loads(done.stdout)["failed"].keys() == {"User2"}
    assert (out / "contexts_en.jsonl").read_text() == "" and lines(out / "ledger.jsonl")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["failed_synthesis"]["User2"]["status"] == "missing"
    assert len(manifest["failed_synthesis"]["User2"]["traits_incomplete"]) == 54


@pytest.mark.battery
def test_a_user_missing_one_trait_is_written_and_named_incomplete(cli, tmp_path, env):
    out = tmp_path / "h"
    # 1% of calls fail, no retries: with this seed, one of three users loses a trait's call, the others do not
    done = cli(
        "simulate",
        "history",
        "--limit",
        "3",
        "--out",
        str(out),
        "--model",
        "scripted?error_rate=0.01",
        "--max-retries",
        "0",
        "--no-check",
        "--no-progress",
        env=env,
    )
    assert done.returncode == EXIT_FAILURES, done.stderr
    assert "users: 2 within the protocol, 1 incomplete, 0 failed (of 3)" in done.stderr.splitlines()
    assert "  1 x failed: history_writer model scripted?error_rate=0.01 failed: " in done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    [partial] = [u for u, f in manifest["per_user"].items() if f["synthesis"]["status"] == "partial"]
    synthesis = manifest["per_user"][partial]["synthesis"]
    [(trait, report)] = synthesis["traits_incomplete"].items()
    assert report["written"] == 0 and report["failed_calls"] == 1 and report["status"] == "missing"
    assert synthesis["items_written"] == synthesis["items_planned"] - report["planned"]
    written = [r["userid"] for r in lines(out / "contexts_en.jsonl")]
    assert written == ["User1", "User2", "User3"]  # the partial user is kept, with what it has
    assert manifest["recipe"]["benchmark"]["options"]["users"] == written
    assert manifest["overall"]["users"] == 3 and manifest["overall"]["complete_users"] == 2

    # again, without the faults (the same writer: fault rates do not change its answers), it continues: only the
    # missing trait is asked for
    again = cli(
        "simulate",
        "history",
        "--limit",
        "3",
        "--out",
        str(out),
        "--model",
        "scripted",
        "--no-check",
        "--no-progress",
        env=env,
    )
    assert again.returncode == EXIT_OK, again.stderr
    second = json.loads((out / "manifest.json").read_text())
    assert second["sessions"] == 2 and second["ledger"]["calls"] == 1
    session = [e for e in lines(out / "synthesis.jsonl")][-report["planned"] :]
    assert {e["trait"] for e in session} == {trait} and all(e["kind"] == "accepted" for e in session)
    assert second["per_user"][partial]["synthesis"]["items_from_earlier_sessions"] == synthesis["items_written"]


@pytest.mark.battery
def test_a_session_ended_by_its_time_limit_is_continued_by_the_next(cli, tmp_path, env):
    out = tmp_path / "h"
    model = "scripted?latency_ms=4000"  # 52 trait calls, eight at a time: seven rounds, about 28 s in all
    first = cli(
        "simulate",
        "history",
        "--users",
        "User1",
        "--out",
        str(out),
        "--model",
        model,
        "--no-check",
        "--time-limit",
        "0.3",
        "--no-cache",
        "--no-progress",
        env=env,
    )
    assert first.returncode == EXIT_FAILURES, first.stderr
    assert any(line.startswith("the session's time limit was reached after") for line in first.stderr.splitlines())
    manifest = json.loads((out / "manifest.json").read_text())
    synthesis = manifest["per_user"]["User1"]["synthesis"]
    assert manifest["time_limit_reached"] and synthesis["status"] == "partial"
    assert 0 < synthesis["items_written"] < synthesis["items_planned"]
    unattempted = sum(
        t["missing_by_reason"].get("not attempted: the session's time limit came first", 0)
        for t in synthesis["traits_incomplete"].values()
    )
    assert unattempted == synthesis["items_planned"] - synthesis["items_written"]
    kept = {e["item"]["id"]: e["item"] for e in lines(out / "synthesis.jsonl") if e["kind"] == "accepted"}
    assert len(kept) == synthesis["items_written"]  # every item accepted before the limit is on disk
    incomplete = set(synthesis["traits_incomplete"])
    journal_before = len(lines(out / "synthesis.jsonl"))

    second = cli(
        "simulate",
        "history",
        "--users",
        "User1",
        "--out",
        str(out),
        "--model",
        model,
        "--no-check",
        "--no-cache",
        "--no-progress",
        env=env,
    )
    assert second.returncode == EXIT_OK, second.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sessions"] == 2 and manifest["per_user"]["User1"]["synthesis"]["status"] == "complete"
    new = lines(out / "synthesis.jsonl")[journal_before:]
    assert {e["trait"] for e in new} == incomplete  # finished traits make no new call (no cache here)
    assert manifest["ledger"]["provider_calls"] == len(incomplete)
    [record] = lines(out / "contexts_en.jsonl")
    items = {i["id"]: i for i in [*record["memories"], *record["dialogues"]]}
    assert all(items[i] == item for i, item in kept.items())  # the first session's items, as they were


def test_a_history_is_continued_only_under_the_same_plan_and_writer(cli, tmp_path, env):
    out = tmp_path / "h"
    done = cli("simulate", "history", "--users", "User1", "--out", str(out), "--no-check", "--no-progress", env=env)
    assert done.returncode == EXIT_OK, done.stderr
    other = cli(
        "simulate",
        "history",
        "--users",
        "User1",
        "--out",
        str(out),
        "--seed",
        "1",
        "--no-check",
        "--no-progress",
        env=env,
    )
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert f"{out} holds a history written with options.seed = 0, now 1" in other.stderr
    writer = cli(
        "simulate",
        "history",
        "--users",
        "User1",
        "--out",
        str(out),
        "--model",
        "scripted?seed=3",
        "--no-check",
        "--no-progress",
        env=env,
    )
    assert writer.returncode == 2 and "models.history_writer.model = 'scripted', now 'scripted?seed=3'" in writer.stderr


def test_check_counts_the_users_breaking_the_protocol_and_exits_3(cli, env):
    done = cli("simulate", "check", "--contexts", "tests/fixtures/pdr_contexts/contexts_en.jsonl", env=env)
    assert done.returncode == EXIT_FAILURES
    stderr = done.stderr.splitlines()
    assert "users: 0 within the protocol, 25 breaking it, 0 failed (of 25)" in stderr
    top = stderr[stderr.index("most common protocol problems:") + 1 :]
    top = top[: next((i for i, line in enumerate(top) if not line.startswith("  ")), len(top))]
    assert top and all(" x " in line for line in top) and len(top) <= 3
