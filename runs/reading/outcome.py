"""How a run ended, told honestly: how many episodes were scored, failed, degraded or never
finished, the most common reasons, the degradations by kind, and the exit code that says so.

Exit codes of `atelier run` (and the other commands that report on a run):

    0   every episode finished, every judge scored it, and nothing degraded (but kinds the recipe
        tolerates: `[run] tolerate = [...]`, still reported)
    1   a bug: an exception nobody expected (its traceback is saved; see runs.cli)
    2   bad input: an invalid recipe, a failed preflight, unreadable files; nothing was started
    3   the run finished, but some episodes or judgments failed, or some step degraded (each
        recorded with its reason or kind); or its budget was reached (`[run] budget_usd`): the
        episodes it could not afford were not started, and a larger --budget-usd resumes them
    130 interrupted (Ctrl-C): what finished is kept; the same command resumes the run

A judgment whose score is undefined by its protocol (PQR's R for a report citing nothing, with
`no_citation = "exclude"`) is not a failure: it is counted apart, as `undefined`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from atelier.benchmarks.common.degradation import counts_by_kind

if TYPE_CHECKING:  # imported by `arun`'s caller to read the run's outcome: it stays light
    from atelier.runs.folder.results import ResultRecord

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
    undefined: int = 0  # judgments whose score its protocol leaves undefined (not failures)
    degraded_episodes: int = 0  # episodes with at least one degraded step (or a contract clause they failed on)
    episode_reasons: Counter[str] = field(default_factory=Counter)
    judgment_reasons: Counter[str] = field(default_factory=Counter)
    degraded: Counter[str] = field(default_factory=Counter)  # kind -> total count
    degraded_cases: dict[str, list[str]] = field(default_factory=dict)  # kind -> result keys, in key order
    tolerated: frozenset[str] = frozenset()
    judged: bool = True  # whether any judge scores this run's episodes (else they are answered, not scored)
    unmeasured: list[str] = field(default_factory=list)  # paper-table numbers ours has no case for (n = 0)
    budget_reached: str | None = None  # "budget reached: spent $X of $Y; ...": the budget left episodes unstarted
    torn: str | None = None  # results.jsonl's torn last line, left unread (`ResultsFile.torn`)

    @property
    def failing_degradations(self) -> dict[str, int]:
        """The degradations that fail the run: every kind the recipe does not tolerate."""
        return {kind: n for kind, n in sorted(self.degraded.items()) if kind not in self.tolerated}

    @property
    def exit_code(self) -> int:
        if self.budget_reached:  # episodes not started for want of budget: not an interruption
            return EXIT_FAILURES
        if self.missing:
            return EXIT_INTERRUPTED
        failing = self.failed or self.unscored or self.failing_degradations or self.unmeasured
        return EXIT_FAILURES if failing else EXIT_OK

    def as_dict(self) -> dict:
        return {
            "expected": self.expected,
            "scored": self.scored,
            "unscored": self.unscored,
            "failed": self.failed,
            "missing": self.missing,
            "undefined": self.undefined,
            "judged": self.judged,
            "unmeasured": self.unmeasured,
            "budget_reached": self.budget_reached,
            "degraded_episodes": self.degraded_episodes,
            "degraded": [
                {
                    "kind": kind,
                    "count": n,
                    "tolerated": kind in self.tolerated,
                    "episodes": self.degraded_cases.get(kind, []),
                }
                for kind, n in sorted(self.degraded.items())
            ],
            "failure_reasons": [{"reason": r, "count": n} for r, n in self.episode_reasons.most_common()],
            "judgment_failure_reasons": [{"reason": r, "count": n} for r, n in self.judgment_reasons.most_common()],
        }

    def lines(self, top: int = 3) -> list[str]:
        """What to print at the end of a run."""
        head = f"episodes: {self.scored} {'scored' if self.judged else 'answered (no judge scores them)'}"
        if self.unscored:
            head += f", {self.unscored} answered but not fully judged"
        head += f", {self.failed} failed"
        if self.missing:
            head += f", {self.missing} not run"
        head += f" (of {self.expected})"
        if self.undefined:
            head += f"; {self.undefined} judgment{'s' * (self.undefined != 1)} undefined by protocol"
        unmeasured = (
            [
                f"not measured (n = 0): {len(self.unmeasured)} paper-table number"
                f"{'s' * (len(self.unmeasured) != 1)}, e.g. {self.unmeasured[0]}"
            ]
            if self.unmeasured
            else []
        )
        return [
            head,
            *([self.budget_reached] if self.budget_reached else []),
            *([self.torn] if self.torn else []),
            *self.degradation_lines(),
            *unmeasured,
            *most_common_lines("episode failures", self.episode_reasons, top),
            *most_common_lines("judgment failures", self.judgment_reasons, top),
        ]

    def degradation_lines(self) -> list[str]:
        if not self.degraded:
            return []
        kinds = ", ".join(
            f"{kind} {n}" + (" (tolerated)" if kind in self.tolerated else "")
            for kind, n in sorted(self.degraded.items())
        )
        return [f"degraded: {self.degraded_episodes} episode{'s' * (self.degraded_episodes != 1)} (by kind: {kinds})"]


def most_common_lines(title: str, reasons: Counter[str], top: int = 3) -> list[str]:
    """`most common <title>:` and the `top` reasons with their counts (nothing when there are none)."""
    if not reasons:
        return []
    return [f"most common {title}:", *(f"  {n} x {reason}" for reason, n in reasons.most_common(top))]


def outcome_of(
    records: Iterable[ResultRecord],
    expected_keys: Iterable[str],
    judges: Iterable[str] = (),
    *,
    baselines: Mapping[str, str] | None = None,
    tolerate: Iterable[str] = (),
) -> RunOutcome:
    """Tally the latest record of each expected key (records of other keys are ignored). An answered
    episode counts as scored only when each of `judges` gave it a judgment that did not fail.
    `baselines`: judge key -> the system that judge compares others with, and so never judges
    itself (LaMP-QA pairwise). `tolerate`: degradation kinds that do not fail the run."""
    judges = list(judges)
    baselines = baselines or {}
    latest = {r.key: r for r in records}
    keys = list(dict.fromkeys(expected_keys))
    outcome = RunOutcome(expected=len(keys), tolerated=frozenset(tolerate), judged=bool(judges))
    for key in keys:
        record = latest.get(key)
        if record is None:
            outcome.missing += 1
            continue
        if not record.ok:
            outcome.failed += 1
            outcome.episode_reasons[reason_of(record.error or "")] += 1
            broke = counts_by_kind(record.degraded)  # the contract clause it broke (benchmarks/common/contract.py)
            outcome.degraded_episodes += bool(broke)
            for kind, n in broke.items():
                outcome.degraded[kind] += n
                outcome.degraded_cases.setdefault(kind, []).append(key)
            continue
        given = {j.judge: j for j in record.judgments}
        due = [name for name in judges if baselines.get(name) != record.system]
        failed = [name for name in due if given.get(name) is None or given[name].failed]
        for name in failed:
            judgment = given.get(name)
            why = (judgment.error if judgment else None) or "no judgment recorded"
            outcome.judgment_reasons[f"{name}: {reason_of(why)}"] += 1
        outcome.undefined += sum(1 for name in due if name not in failed and given[name].score is None)
        if failed:
            outcome.unscored += 1
        else:
            outcome.scored += 1
        kinds = counts_by_kind(record.degraded)
        if kinds:
            outcome.degraded_episodes += 1
            outcome.degraded.update(kinds)
            for kind in kinds:
                outcome.degraded_cases.setdefault(kind, []).append(key)
    return outcome
