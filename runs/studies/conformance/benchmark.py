"""The benchmark contract (benchmarks/registry.py, benchmarks/case.py), checked on a loader:

- cases in the Case schema: every split and setting loads at least one `Case`, with unique case
  ids and, within each case, unique history event ids;
- the limit respected: `limit = 1` gives one case;
- loading is repeatable: the same split, setting and seed give the same cases;
- settings expose what they say: `task_only` shows no history, `persona` only the explicit persona,
  and no system's view carries gold (the `CaseView` type has no gold field).

REF may also be a JSON Lines file of cases (`cases.jsonl`), checked as the `jsonl` benchmark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from atelier.benchmarks.case import Case, CaseView, ExplicitPersona
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import BENCHMARKS, load_cases
from atelier.runs.studies.conformance.clauses import Clause, Report, broken, checked, held, verdict

PROTOCOL = "benchmark"
SCHEMA = "cases in the Case schema"
LIMIT = "the limit respected"
REPEATABLE = "loading is repeatable"
SETTINGS = "settings expose what they say"


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
        return load_cases(self.name, split, setting, limit, self.options, seed=seed)

    async def run(self) -> Report:
        # cases that cannot load are bad input (exit 2, the file's own line and case), not four broken clauses
        self.loaded[(self.spec.split_default, self.spec.setting_default)] = self.load(
            self.spec.split_default, self.spec.setting_default
        )
        report = Report(PROTOCOL, self.ref)
        report.clauses.append(await checked(SCHEMA, self.schema))
        report.clauses.append(await checked(LIMIT, self.limit))
        report.clauses.append(await checked(REPEATABLE, self.repeatable))
        report.clauses.append(await checked(SETTINGS, self.settings))
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
                ids = [c.id for c in cases]
                if len(ids) != len(set(ids)):
                    problems.append(f"split {split}, setting {setting}: case ids repeat")
                for case in cases:
                    events = Counter(e.id for e in case.history)
                    repeated = sorted(event for event, n in events.items() if n > 1)
                    if repeated:
                        problems.append(f"case {case.id}: history event id {', '.join(map(repr, repeated))} repeats")
                        break
        if problems:
            return broken(SCHEMA, "; ".join(list(dict.fromkeys(problems))[:4]))
        return held(
            SCHEMA,
            f"{len(self.spec.splits)} splits x {len(self.spec.settings)} settings, {min(sizes)}–{max(sizes)} cases "
            "each; case ids and each history's event ids unique",
        )

    async def limit(self) -> Clause:
        split, setting = self.spec.split_default, self.spec.setting_default
        one = self.load(split, setting, limit=1)
        return verdict(LIMIT, len(one) == 1, f"limit 1 gave {len(one)} case(s)")

    async def repeatable(self) -> Clause:
        split, setting = self.spec.split_default, self.spec.setting_default
        first, second = self.load(split, setting, seed=7), self.load(split, setting, seed=7)
        same = [c.model_dump(mode="json") for c in first] == [c.model_dump(mode="json") for c in second]
        return verdict(
            REPEATABLE, same, f"two loads with seed 7: {'the same' if same else 'different'} {len(first)} cases"
        )

    async def settings(self) -> Clause:
        problems = []
        split = self.spec.split_default
        for setting in self.spec.settings:
            for case in self.loaded.get((split, setting)) or self.load(split, setting):
                view = case.view(setting)
                if not isinstance(view, CaseView) or hasattr(view, "gold"):
                    problems.append(f"case {case.id}: its view carries gold")
                if setting == "task_only" and view.history:
                    problems.append(f"case {case.id}: setting task_only shows {len(view.history)} history events")
                if setting == "persona" and any(not isinstance(e, ExplicitPersona) for e in view.history):
                    problems.append(f"case {case.id}: setting persona shows events other than the persona")
                if problems:
                    break
        if problems:
            return broken(SETTINGS, "; ".join(problems[:4]))
        return held(
            SETTINGS, f"settings {', '.join(self.spec.settings)}: each view as its setting says, no gold in any"
        )
