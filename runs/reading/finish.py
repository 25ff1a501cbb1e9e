"""A run's ending: summary.json and report.html written from what its folder holds, and how it ended."""

from __future__ import annotations

from typing import Any, Protocol

from atelier.agents.judges.base import ComparativeJudge, create_judge
from atelier.agents.models.ledger import ledger_totals, read_ledger
from atelier.benchmarks.case import Case
from atelier.graphs.pipelines import PIPELINES
from atelier.runs.folder.controls import run_control_keys, system_controls
from atelier.runs.folder.epochs import run_epochs
from atelier.runs.folder.layout import RunFolder, expected_keys
from atelier.runs.folder.recipe import Recipe
from atelier.runs.folder.results import ResultsFile, write_json_atomic
from atelier.runs.reading.outcome import RunOutcome, outcome_of
from atelier.runs.reading.usage import Prices, system_usage, uncached_totals
from atelier.tools.web import web_description


class BudgetState(Protocol):
    """What a run's budget (`atelier.runs.execution.cost.Budget`) tells its ending."""

    @property
    def reached(self) -> bool: ...

    def line(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...


def searched_web(recipe: Recipe) -> dict[str, Any] | None:
    """The web the run's systems searched (None when no system uses the web), with a warning when a
    recipe that reproduces a paper searched the bundled 63-page sample: its numbers rest on a web
    that knows nothing of most of the paper's tasks."""
    if not any(PIPELINES.get(s.pipeline).uses_web for s in recipe.systems):
        return None
    described = web_description(recipe.web)
    if recipe.report.reproduces and described["corpus"] == "sample":
        described["warning"] = (
            f"this recipe reproduces {recipe.report.reproduces} but searched the bundled sample "
            f"corpus ({described['documents']} pages on UK household topics); set [web.sandbox] "
            'corpus = "wiki" (or a real search provider)'
        )
    return described


def run_cases(config: dict[str, Any]) -> dict[str, Case]:
    """The cases of a run, loaded again as its recipe names them ({} when the data is not here)."""
    try:
        loaded = Recipe.model_validate(config["recipe"]).cases(limited=False)
    except Exception:  # noqa: BLE001 - the report then shows case ids without their queries
        return {}
    wanted = set(config["cases"])
    return {case.id: case for case in loaded if case.id in wanted}


class StoredBudget:
    """The budget a run's summary.json recorded (`budget`), for a command that writes its summary
    again (`atelier report`): what it spent and whether it stopped the run are kept."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored

    @property
    def reached(self) -> bool:
        return bool(self.stored.get("reached"))

    def line(self) -> str:
        return (
            f"budget reached: spent ${float(self.stored.get('spent_usd') or 0):.4f} of "
            f"${float(self.stored.get('limit_usd') or 0):.4f}; resume with a larger --budget-usd"
        )

    def as_dict(self) -> dict[str, Any]:
        return dict(self.stored)


def stored_budget(folder: RunFolder) -> StoredBudget | None:
    """The budget the folder's summary.json recorded, if any."""
    summary = _stored_summary(folder)
    return StoredBudget(summary["budget"]) if isinstance(summary.get("budget"), dict) else None


def _stored_summary(folder: RunFolder) -> dict[str, Any]:
    import json

    try:
        loaded = json.loads(folder.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def folder_outcome(folder: RunFolder, config: dict[str, Any]) -> RunOutcome:
    """How the run in `folder` ended, from what it holds (results.jsonl; summary.json for the paper
    numbers it could not measure and its budget), writing nothing: what every command that reports
    on a run ends with (`RunOutcome.lines`, `exit_code`), as `atelier run` does."""
    outcome = _outcome(folder, config)
    summary = _stored_summary(folder)
    outcome.unmeasured = [f"{row['row']} / {row['metric']}" for row in summary.get("paper") or [] if not row.get("n")]
    budget = stored_budget(folder)
    if budget is not None and budget.reached:
        outcome.budget_reached = budget.line()
    return outcome


def _outcome(folder: RunFolder, config: dict[str, Any]) -> RunOutcome:
    recipe = config["recipe"]
    judge_objects = [create_judge(j) for j in recipe["judges"]]
    keys = expected_keys(config["cases"], [s["name"] for s in recipe["systems"]], run_epochs(config))
    keys += run_control_keys(config)  # counterfactual controls are episodes of the run too
    wanted = set(keys)
    results = ResultsFile(folder.results)
    records = [r for k, r in results.load().items() if k in wanted]
    baselines = {j.key: j.baseline for j in judge_objects if isinstance(j, ComparativeJudge)}
    outcome = outcome_of(
        records, keys, [j.key for j in judge_objects], baselines=baselines, tolerate=recipe["run"].get("tolerate", [])
    )
    outcome.torn = results.torn()
    return outcome


def finish_run(
    folder: RunFolder, config: dict[str, Any], cases: list[Case] | None = None, *, budget: BudgetState | None = None
) -> RunOutcome:
    """Write summary.json and report.html for exactly the episodes of the recipe in `config` (its
    cases x systems x epochs, and the counterfactual controls it asks for: `personalization`), from
    what results.jsonl and ledger.jsonl hold; return how the run ended.
    `cases` (the run's, else loaded again) give the report each case's query; `budget`, the run's
    (`[run] budget_usd`), what it spent and whether it stopped the run."""
    from atelier.runs.reading.comparisons import (  # scipy and matplotlib: only once there is
        versus_baseline,
        versus_paper,
    )
    from atelier.runs.reading.personalization import personalization
    from atelier.runs.reading.report import write_report  # something to summarize (a failed preflight exits sooner)
    from atelier.runs.reading.summary import epoch_means, summarize

    recipe = config["recipe"]
    systems = [s["name"] for s in recipe["systems"]]
    judge_objects = [create_judge(j) for j in recipe["judges"]]
    judges = [j.key for j in judge_objects]
    epochs = run_epochs(config)
    keys = expected_keys(config["cases"], systems, epochs)
    wanted, controlled = set(keys), set(run_control_keys(config))
    results = ResultsFile(folder.results)
    held = results.load()
    records = [r for k, r in held.items() if k in wanted]
    controls = [r for k, r in held.items() if k in controlled]  # never in the systems' own figures
    baselines = {j.key: j.baseline for j in judge_objects if isinstance(j, ComparativeJudge)}
    outcome = outcome_of(
        records + controls,
        keys + run_control_keys(config),
        judges,
        baselines=baselines,
        tolerate=recipe["run"].get("tolerate", []),
    )
    if budget is not None and budget.reached:
        outcome.budget_reached = budget.line()
    outcome.torn = results.torn()
    ledger = read_ledger(folder.ledger)
    by_id = {case.id: case for case in cases} if cases is not None else run_cases(config)
    # what the statistics resample: None when the cases could not be loaded (said in the summary)
    clusters = {case_id: case.clusters for case_id, case in by_id.items()} if by_id else None
    summary = summarize(
        records,
        systems,
        judges,
        seed=recipe.get("seed", 0),
        aggregates={j.key: j.aggregate for j in judge_objects},
        epochs=epochs,
        clusters=clusters,
        reuse_judgments=bool((recipe.get("run") or {}).get("reuse_judgments", False)),
    )
    for name, usage in system_usage(records, ledger, systems, config["cases"], recipe.get("models")).items():
        summary["systems"][name]["usage"] = usage
    case_ids = set(config["cases"])
    personalized = personalization(
        records + controls,
        system_controls(recipe),
        judges,
        seed=recipe.get("seed", 0),
        clusters=clusters,
        ledger=[e for e in ledger if e.case_id in case_ids],
        donors=(config.get("controls") or {}).get("swapped_donors"),
        headline_only=[j.key for j in judge_objects if j.case_specific_criteria],
    )
    if personalized is not None:
        summary["personalization"] = personalized
    report = recipe.get("report") or {}
    summary["versus_baseline"] = versus_baseline(  # paired on cases: each case's mean over its epochs
        epoch_means(records) if epochs > 1 else records,
        systems,
        judges,
        report.get("baseline"),
        seed=recipe.get("seed", 0),
        clusters=clusters,
    )
    summary["paper"] = versus_paper(
        records, report.get("paper") or [], by_id, seed=recipe.get("seed", 0), clusters=clusters
    )
    summary["web"] = searched_web(Recipe.model_validate(recipe))
    outcome.unmeasured = [f"{row['row']} / {row['metric']}" for row in summary["paper"] if not row["n"]]
    # the run's calls: its episodes' and its own (preflight), not those of systems or cases left out since
    calls = [
        e for e in ledger if (e.case_id is None or e.case_id in case_ids) and (e.system is None or e.system in systems)
    ]
    summary = {
        "run_id": config["run_id"],
        # true exactly when some call was answered by `scripted` (a rescore's responses: their own flag)
        "dry_run": any(e.dry_run for e in calls) or any(r.dry_run for r in records),
        "benchmark": recipe["benchmark"],
        "n_cases": len(config["cases"]),
        "judges": judges,
        **summary,
        "episodes": outcome.as_dict(),
        "ledger": ledger_totals(calls),
        # the same calls with nothing answered from the response cache: what a first run costs
        "ledger_uncached": uncached_totals(calls, Prices(recipe.get("models"))),
    }
    if budget is not None:
        summary["budget"] = budget.as_dict()
    write_json_atomic(folder.summary, summary)
    write_report(
        folder.report,
        config=config,
        summary=summary,
        records=records,
        cases=by_id,
    )
    return outcome
