"""How a run ended, told honestly: how many episodes were scored, failed or never finished, the
most common reasons, and the exit code that says so.

Exit codes of `atelier run` (and the other commands that report on a run):

    0   every episode finished and every judge scored it
    1   a bug: an exception nobody expected (its traceback is saved; see runs.cli)
    2   bad input: an invalid recipe, a failed preflight, unreadable files; nothing was started
    3   the run finished, but some episodes or judgments failed (each recorded with its reason)
    130 interrupted (Ctrl-C): what finished is kept; the same command resumes the run
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from runs.results import ResultRecord

EXIT_OK = 0
EXIT_FAILURES = 3
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_REASON_WIDTH = 160


def reason_of(error: str) -> str:
    """One line of an error, short enough to be counted with others like it."""
    line = (error or "unknown error").strip().splitlines()[0] if error and error.strip() else "unknown error"
    return line if len(line) <= _REASON_WIDTH else line[: _REASON_WIDTH - 1] + "…"


@dataclass
class RunOutcome:
    """The episodes of the current recipe (cases x systems) and what became of each."""

    expected: int
    scored: int = 0
    unscored: int = 0  # the system answered, but at least one judge failed on it
    failed: int = 0
    missing: int = 0
    episode_reasons: Counter[str] = field(default_factory=Counter)
    judgment_reasons: Counter[str] = field(default_factory=Counter)

    @property
    def exit_code(self) -> int:
        if self.missing:
            return EXIT_INTERRUPTED
        return EXIT_FAILURES if (self.failed or self.unscored) else EXIT_OK

    def as_dict(self) -> dict:
        return {
            "expected": self.expected,
            "scored": self.scored,
            "unscored": self.unscored,
            "failed": self.failed,
            "missing": self.missing,
            "failure_reasons": [{"reason": r, "count": n} for r, n in self.episode_reasons.most_common()],
            "judgment_failure_reasons": [{"reason": r, "count": n} for r, n in self.judgment_reasons.most_common()],
        }

    def lines(self, top: int = 3) -> list[str]:
        """What to print at the end of a run."""
        head = f"episodes: {self.scored} scored"
        if self.unscored:
            head += f", {self.unscored} answered but not fully judged"
        head += f", {self.failed} failed"
        if self.missing:
            head += f", {self.missing} not run"
        head += f" (of {self.expected})"
        return [head, *most_common_lines("episode failures", self.episode_reasons, top),
                *most_common_lines("judgment failures", self.judgment_reasons, top)]


def most_common_lines(title: str, reasons: Counter[str], top: int = 3) -> list[str]:
    """`most common <title>:` and the `top` reasons with their counts (nothing when there are none)."""
    if not reasons:
        return []
    return [f"most common {title}:", *(f"  {n} x {reason}" for reason, n in reasons.most_common(top))]


def outcome_of(records: Iterable[ResultRecord], expected_keys: Iterable[str], judges: Iterable[str] = ()) -> RunOutcome:
    """Tally the latest record of each expected key (records of other keys are ignored). An answered
    episode counts as scored only when each of `judges` gave it a score."""
    judges = list(judges)
    latest = {r.key: r for r in records}
    keys = list(dict.fromkeys(expected_keys))
    outcome = RunOutcome(expected=len(keys))
    for key in keys:
        record = latest.get(key)
        if record is None:
            outcome.missing += 1
        elif not record.ok:
            outcome.failed += 1
            outcome.episode_reasons[reason_of(record.error or "")] += 1
        else:
            given = {j.judge: j for j in record.judgments}
            failed = [name for name in judges if given.get(name) is None or given[name].score is None]
            for name in failed:
                judgment = given.get(name)
                why = (judgment.error if judgment else None) or ("no score" if judgment else "no judgment recorded")
                outcome.judgment_reasons[f"{name}: {reason_of(why)}"] += 1
            if failed:
                outcome.unscored += 1
            else:
                outcome.scored += 1
    return outcome
