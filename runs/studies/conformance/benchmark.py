"""The benchmark contract (benchmarks/contract.py: the clauses every run holds the cases it loads
and each system's view to, and these), checked on a loader:

- cases in the Case schema: every split and setting loads at least one `Case`, with unique case
  ids and, within each case, unique history event ids;
- one user's events the same in every case: an event id of a user names one event in every case;
- the limit respected: `limit = 1` gives one case;
- loading is repeatable: the same split, setting and seed give the same cases;
- settings expose what they say: every case carries the setting it was loaded for (whatever the
  loader wrote), and each view is what its setting says — `task_only` no history, `persona` only
  the explicit persona (which a persona setting needs), no gold in any (the `CaseView` type has
  no gold field).

Cases are loaded as a run loads them (`load_cases`, whose checks are these clauses: here each
is reported on its own). REF may also be a JSON Lines file of cases (`cases.jsonl`), checked as
the `jsonl` benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atelier.benchmarks import contract
from atelier.benchmarks.case import Case, CaseView
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import BENCHMARKS, load_cases
from atelier.runs.studies.conformance.clauses import Clause, Report, broken, checked, held, verdict


class BenchmarkKit:
    def __init__(self, ref: str, options: dict[str, Any], workdir: Path) -> None:
        self.ref = ref
        if ref.endswith(".jsonl") and "path" not in options:
            options = {**options, "path": str(Path(ref).expanduser().resolve())}
            self.name = "jsonl"
        else:
            self.name = ref
        self.spec = BENCHMARKS.get(self.name)
        try:
            self.options = self.spec.options.model_validate(options)
        except Exception as exc:  # noqa: BLE001 - pydantic's message, in one line
            raise ConfigError(f"--option: {' '.join(str(exc).split())[:300]}") from None
        self.workdir = workdir
        self.loaded: dict[tuple[str, str], list[Case]] = {}

    def load(self, split: str, setting: str, limit: int | None = None, seed: int = 0) -> list[Case]:
        return load_cases(self.name, split, setting, limit, self.options, seed=seed, checked=False)

    async def run(self) -> Report:
        # cases that cannot load are bad input (exit 2, the file's own line and case), not broken clauses
        self.loaded[(self.spec.split_default, self.spec.setting_default)] = self.load(
            self.spec.split_default, self.spec.setting_default
        )
        report = Report(contract.PROTOCOL, self.ref)
        report.clauses.append(await checked(contract.SCHEMA.name, self.schema))
        report.clauses.append(await checked(contract.USER_EVENTS.name, self.user_events))
        report.clauses.append(await checked(contract.LIMIT.name, self.limit))
        report.clauses.append(await checked(contract.REPEATABLE.name, self.repeatable))
        report.clauses.append(await checked(contract.SETTINGS.name, self.settings))
        return report

    async def schema(self) -> Clause:
        problems, sizes = [], []
        for split in self.spec.splits:
            for setting in self.spec.settings:
                cases = self.loaded.get((split, setting)) or self.load(split, setting)
                self.loaded[(split, setting)] = cases
                sizes.append(len(cases))
                if not all(isinstance(c, Case) for c in cases):
                    problems.append(f"split {split}, setting {setting}: not every item is a Case")
                if not cases:
                    problems.append(f"split {split}, setting {setting}: no case")
                ids = [c.id for c in cases]
                if len(ids) != len(set(ids)):
                    problems.append(f"split {split}, setting {setting}: case ids repeat")
                own = f"{contract.SCHEMA.name}: "
                problems += [p.removeprefix(own) for p in contract.history_problems(cases) if p.startswith(own)]
        if problems:  # each once: a file's problem is the same under every split and setting
            return broken(contract.SCHEMA.name, "; ".join(list(dict.fromkeys(problems))[:4]))
        return held(
            contract.SCHEMA.name,
            f"{len(self.spec.splits)} splits x {len(self.spec.settings)} settings, {min(sizes)}–{max(sizes)} cases "
            "each; case ids and each history's event ids unique",
        )

    async def user_events(self) -> Clause:
        split, setting = self.spec.split_default, self.spec.setting_default
        everything = self.loaded.get((split, setting)) or self.load(split, setting)
        problems = [p for p in contract.history_problems(everything) if p.startswith(f"{contract.USER_EVENTS.name}: ")]
        if problems:
            return broken(
                contract.USER_EVENTS.name, "; ".join(p.removeprefix(f"{contract.USER_EVENTS.name}: ") for p in problems)
            )
        users = {c.user_id for c in everything}
        return held(
            contract.USER_EVENTS.name, f"{len(users)} users over {len(everything)} cases: each event id names one event"
        )

    async def limit(self) -> Clause:
        split, setting = self.spec.split_default, self.spec.setting_default
        one = self.load(split, setting, limit=1)
        return verdict(contract.LIMIT.name, len(one) == 1, f"limit 1 gave {len(one)} case(s)")

    async def repeatable(self) -> Clause:
        split, setting = self.spec.split_default, self.spec.setting_default
        first, second = self.load(split, setting, seed=7), self.load(split, setting, seed=7)
        same = [c.model_dump(mode="json") for c in first] == [c.model_dump(mode="json") for c in second]
        return verdict(
            contract.REPEATABLE.name,
            same,
            f"two loads with seed 7: {'the same' if same else 'different'} {len(first)} cases",
        )

    async def settings(self) -> Clause:
        problems = []
        split = self.spec.split_default
        for setting in self.spec.settings:
            cases = self.loaded.get((split, setting)) or self.load(split, setting)
            problems += contract.setting_problems(cases, setting)
            for case in cases:
                view = case.view()  # under the case's own setting: what the loader's cases say
                if not isinstance(view, CaseView) or hasattr(view, "gold"):
                    problems.append(f"case {case.id}: its view carries gold")
                problem = contract.view_problem(case, view, setting)
                if problem is not None:
                    problems.append(problem)
                if problems:
                    break
        if problems:
            return broken(contract.SETTINGS.name, "; ".join(problems[:4]))
        return held(
            contract.SETTINGS.name,
            f"settings {', '.join(self.spec.settings)}: each view as its setting says, no gold in any",
        )
