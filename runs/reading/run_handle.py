"""A run folder from Python: `open_run(path)` (also `atelier.open_run`) gives a `Run` — its summary,
its typed results and ledger, its config, and `to_pandas()`: one row per episode and judge.

    run = atelier.open_run("runs/out/quickstart-20250101-120000-ab12")
    run.summary["systems"]["direct-full"]["judges"]["lampqa_aspects"]["mean"]
    frame = run.to_pandas()          # pandas: pip install "atelier[notebook]"
    frame.groupby(["system", "judge"])["score"].mean()
    run.effects                      # with [run] controls: own - control per system x judge, with CIs

Everything is read from the folder's files (config.json, results.jsonl, summary.json,
ledger.jsonl), so a run opened later reads exactly what the run that wrote it saw.

`await atelier.arun(...)` imports this module on the caller's side to hand back a `Run`: what
reading results, the ledger and the controls needs is imported when first read, not here (importing
it would grow the caller's heap, whose garbage collections pause the caller's loop).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import read_json_file

if TYPE_CHECKING:
    import pandas

    from atelier.agents.models.ledger import LedgerEntry
    from atelier.runs.folder.layout import RunFolder
    from atelier.runs.folder.results import ResultRecord
    from atelier.runs.reading.outcome import RunOutcome

COLUMNS = (
    "run_id",
    "case_id",
    "system",
    "epoch",
    "user_id",
    "setting",
    "status",
    "judge",
    "score",
    "scale",
    "judge_failed",
    "judge_error",
    "criteria",
    "episode_error",
    "degraded",
    "degraded_kinds",
    "memory_backend",
    "memory_tokens",
    "response_chars",
    "citations",
    "latency_s",
    "cost_usd",
    "dry_run",
    "resumed_from",
)


@dataclass(frozen=True)
class Run:
    """A run folder, read. `outcome` is how the run ended when this process ran it (`atelier.run`)."""

    path: Path
    outcome: RunOutcome | None = None

    @property
    def folder(self) -> RunFolder:
        from atelier.runs.folder.layout import RunFolder

        return RunFolder(self.path)

    @cached_property
    def config(self) -> dict[str, Any]:
        """config.json: the run as resolved (its recipe, cases, plugins, versions)."""
        return read_json_file(self.folder.config)

    @property
    def summary(self) -> dict[str, Any]:
        """summary.json: per system and judge the mean with its 95% CI, episodes, degradations, cost."""
        return read_json_file(self.folder.summary)

    @property
    def results(self) -> list[ResultRecord]:
        """The run's episodes (the latest record of each of the recipe's case x system x epoch), typed."""
        from atelier.runs.folder.layout import expected_keys
        from atelier.runs.folder.results import ResultsFile

        recipe = self.config["recipe"]
        keys = expected_keys(self.config["cases"], [s["name"] for s in recipe["systems"]], _epochs(recipe))
        held = ResultsFile(self.folder.results).load()
        return [held[key] for key in keys if key in held]

    @property
    def control_results(self) -> list[ResultRecord]:
        """The run's counterfactual control episodes (`[run] controls`), typed: each marked with its
        `control`; never among `results`."""
        from atelier.runs.folder.controls import run_control_keys
        from atelier.runs.folder.results import ResultsFile

        held = ResultsFile(self.folder.results).load()
        return [held[key] for key in run_control_keys(self.config) if key in held]

    @property
    def personalization(self) -> dict[str, Any] | None:
        """summary.json's `personalization` (None: the run had no controls): the effects own − control
        per system, judge (and criterion) and control with their intervals, which criteria respond to
        the user, and the control episodes' counts, leaks and cost."""
        return self.summary.get("personalization")

    @property
    def effects(self) -> list[dict[str, Any]]:
        """The personalization effects as rows (`pandas.DataFrame(run.effects)`): system, judge,
        criterion (None: the headline score), control, n, mean_a (own), mean_b (control),
        mean_difference (the effect), ci_low, ci_high, p_adjusted, ...; [] without controls."""
        return list((self.personalization or {}).get("effects") or [])

    @property
    def ledger(self) -> list[LedgerEntry]:
        """Every model call of the run: role, model, tokens, cost, latency, cache hit."""
        from atelier.agents.models.ledger import read_ledger

        return read_ledger(self.folder.ledger)

    @property
    def judges(self) -> list[str]:
        """The judges' keys (a judge's label, else its name), as results and the summary name them."""
        return [j.get("label") or j["name"] for j in self.config["recipe"]["judges"]]

    @property
    def report(self) -> Path:
        return self.folder.report

    def to_pandas(self) -> pandas.DataFrame:
        """One row per episode and judge (an episode of a run with no judge: one row, judge None):
        the score on the judge's scale, whether the judgment or the episode failed and why, what
        degraded, the memory and response sizes, latency and cost. Needs pandas (the `notebook` extra)."""
        try:
            import pandas
        except ImportError:
            raise ImportError(
                'Run.to_pandas needs pandas, an optional extra: pip install "atelier[notebook]" (or pandas)'
            ) from None
        return pandas.DataFrame(self.rows(), columns=list(COLUMNS))

    def rows(self) -> list[dict[str, Any]]:
        """`to_pandas`'s rows as dicts (no pandas needed)."""
        from atelier.benchmarks.common.degradation import counts_by_kind

        judges: list[str | None] = [*self.judges] or [None]
        rows = []
        for record in self.results:
            given = {j.judge: j for j in record.judgments}
            kinds = counts_by_kind(record.degraded)
            episode = {
                "run_id": record.run_id,
                "case_id": record.case_id,
                "system": record.system,
                "epoch": record.epoch,
                "user_id": record.user_id,
                "setting": record.setting,
                "status": record.status,
                "episode_error": record.error,
                "degraded": sum(kinds.values()),
                "degraded_kinds": ", ".join(f"{k} {n}" for k, n in kinds.items()),
                "memory_backend": record.user_context.backend if record.user_context else None,
                "memory_tokens": record.user_context.tokens if record.user_context else None,
                "response_chars": len(record.response.text) if record.response else None,
                "citations": len(record.response.citations) if record.response else None,
                "latency_s": record.latency_s,
                "cost_usd": record.cost_usd,
                "dry_run": record.dry_run,
                "resumed_from": record.resumed_from,
            }
            for judge in judges:
                judgment = given.get(judge) if judge is not None else None
                rows.append(
                    {
                        **episode,
                        "judge": judge,
                        "score": judgment.score if judgment else None,
                        "scale": judgment.scale if judgment else None,
                        "judge_failed": bool(judgment is None or judgment.failed) if judge is not None else None,
                        "judge_error": (judgment.error if judgment else "no judgment recorded") if judge else None,
                        "criteria": dict(judgment.criteria) if judgment else {},
                    }
                )
        return rows

    def __repr__(self) -> str:
        try:
            episodes = self.summary.get("episodes", {})
        except DataError:
            return f"Run({str(self.path)!r}, no summary)"
        parts = [f"{episodes.get('scored', 0)} scored", f"{episodes.get('failed', 0)} failed"]
        if episodes.get("degraded_episodes"):
            parts.append(f"{episodes['degraded_episodes']} degraded")
        return f"Run({str(self.path)!r}, {', '.join(parts)} of {episodes.get('expected', '?')} episodes)"


def _epochs(recipe: dict[str, Any]) -> int:
    return int((recipe.get("run") or {}).get("epochs", 1))


def open_run(path: str | Path) -> Run:
    """The run folder at `path`; a DataError naming what is missing when it is not one (no
    config.json, or no summary.json yet: a run not finished — resume it to write one)."""
    from atelier.runs.folder.layout import RunFolder

    folder = RunFolder(Path(path).expanduser())
    if not folder.path.is_dir():
        raise DataError(f"no such run folder (looked for {folder.path.absolute()})", file=folder.path)
    for needed in (folder.config, folder.summary):
        if not needed.is_file():
            raise DataError(
                f"not a finished run folder: it has no {needed.name} (a run writes it when it ends; "
                "`atelier run RECIPE --out FOLDER` resumes an unfinished one)",
                file=folder.path,
            )
    json.loads(folder.config.read_text(encoding="utf-8") or "{}")  # readable, or a DataError below
    return Run(folder.path)
