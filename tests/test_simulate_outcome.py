"""`atelier simulate history|check` end like `atelier run`: exit 3 when a user failed (or breaks the
protocol), the counts and the most common reasons on stderr, and the users that did succeed written."""

from __future__ import annotations

import json

from runs.outcome import EXIT_FAILURES
from tests.test_cli_e2e import atelier, env, lines  # noqa: F401 (env: the CLI tests' fixture)


def test_a_history_where_every_user_failed_exits_3_with_the_reason(tmp_path, env):
    out = tmp_path / "h"
    done = atelier("simulate", "history", "--users", "User2", "--out", str(out), "--model", "scripted?error_rate=1",
                   "--max-retries", "0", "--no-progress", env=env)
    assert done.returncode == EXIT_FAILURES, done.stderr
    stderr = done.stderr.splitlines()
    assert "users: 0 within the protocol, 1 failed (of 1)" in stderr
    assert stderr[stderr.index("most common user failures:") + 1].startswith(
        "  1 x history_writer model scripted?error_rate=1 failed: ")
    assert "Traceback" not in done.stderr and "never awaited" not in done.stderr
    assert json.loads(done.stdout)["failed"].keys() == {"User2"}
    assert (out / "contexts_en.jsonl").read_text() == "" and lines(out / "ledger.jsonl")


def test_the_users_that_succeeded_are_written_and_the_failed_ones_named(tmp_path, env):
    out = tmp_path / "h"
    # 1% of calls fail, no retries: with this seed, one of three users loses a call, the others do not
    done = atelier("simulate", "history", "--limit", "3", "--out", str(out), "--model", "scripted?error_rate=0.01",
                   "--max-retries", "0", "--no-check", "--no-progress", env=env)
    assert done.returncode == EXIT_FAILURES, done.stderr
    assert "users: 2 within the protocol, 1 failed (of 3)" in done.stderr.splitlines()
    assert "  1 x history_writer model scripted?error_rate=0.01 failed: " in done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    [failed] = manifest["failed"]
    written = [r["userid"] for r in lines(out / "contexts_en.jsonl")]
    assert sorted([*written, failed]) == ["User1", "User2", "User3"]
    assert manifest["recipe"]["benchmark"]["options"]["users"] == written
    assert manifest["overall"]["users"] == 2 and manifest["overall"]["failed_users"] == 1


def test_check_counts_the_users_breaking_the_protocol_and_exits_3(env):
    done = atelier("simulate", "check", "--contexts", "tests/fixtures/pdr_contexts/contexts_en.jsonl", env=env)
    assert done.returncode == EXIT_FAILURES
    stderr = done.stderr.splitlines()
    assert "users: 0 within the protocol, 25 breaking it, 0 failed (of 25)" in stderr
    top = stderr[stderr.index("most common protocol problems:") + 1:]
    assert top and all(" x " in line for line in top) and len(top) <= 3
