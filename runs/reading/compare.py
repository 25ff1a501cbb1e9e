"""`atelier compare RUN_DIR...`: runs side by side. One row per (run, system), one column per judge
(mean, 95% CI, n, from each run's summary.json); every entry paired with the baseline entry on the
cases both were scored on (same benchmark and case id), the test's p-values adjusted together
(`runs.comparisons`); each interval inverts its test, so it excludes 0 exactly when the unadjusted p
is below 0.05 (said under the table). `--html` writes the same as a page, with what the tables leave out: the runs'
configs side by side with their differences marked, every case's responses and scores side by
side, and the plots (each entry's mean with its CI, each paired difference with its CI).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import KINDS, counts_by_kind
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.folder.results import ResultRecord, ResultsFile
from atelier.runs.reading.comparisons import CORRECTION, adjust, paired_row
from atelier.runs.reading.pages import environment
from atelier.runs.reading.personalization import across_runs
from atelier.runs.reading.plots import Point, dot_plot
from atelier.runs.reading.report import CI_AGREES, ci_text, difference_ci_text, response_parts, untestable_notes
from atelier.runs.reading.usage import format_cost


def _load(run_dir: Path) -> dict[str, Any]:
    from atelier.runs.folder.layout import RunFolder, load_run_config

    config = load_run_config(run_dir)
    folder = RunFolder(Path(run_dir))
    if not folder.summary.exists():
        raise ConfigError(f"{run_dir} has no summary.json yet; write it with `atelier report {run_dir}`")
    summary = json.loads(no_follow.read_text(folder.summary))
    wanted = set(config["cases"])
    held = [r for r in ResultsFile(folder.results).load().values() if r.case_id in wanted]
    return {
        "dir": str(run_dir),
        "run_id": config["run_id"],
        "config": config,
        "summary": summary,
        "records": [r for r in held if r.control is None],  # the systems' own episodes
        "controls": [r for r in held if r.control is not None],  # counterfactual controls: effects only
    }


EXCERPT_CHARS = 400


_MISSING = object()


def _item_name(item: Any) -> str | None:
    name = item.get("label") or item.get("name") or item.get("row")  # a paper row by its label
    return str(name) if name is not None else None


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _aligned(lists: list[list[Any]]) -> list[tuple[str, list[Any]]]:
    """Items of one list of tables (systems, judges, paper rows) across runs, lined up: an item by its
    name when every run has that name; the others pair up in order, so a system renamed in one run
    lines up with itself and only its name differs. Each group: its label and one item per run
    (`_MISSING` where a run has none)."""
    names = [[_item_name(item) for item in items] for items in lists]
    common = [
        n for n in dict.fromkeys(n for run in names for n in run) if n is not None and all(n in run for run in names)
    ]
    groups: list[tuple[str, list[Any]]] = [
        (name, [items[run.index(name)] for items, run in zip(lists, names)]) for name in common
    ]
    taken = [{run.index(name) for name in common} for run in names]  # a name twice in a run: the second is "rest"
    rest = [[item for i, item in enumerate(items) if i not in used] for items, used in zip(lists, taken)]
    for k in range(max((len(r) for r in rest), default=0)):
        items = [r[k] if k < len(r) else _MISSING for r in rest]
        labels = list(dict.fromkeys(_item_name(i) or str(k) for i in items if i is not _MISSING))
        groups.append((" / ".join(labels) if labels else str(k), items))
    return groups


def _flatten_runs(values: list[Any], prefix: str = "") -> list[dict[str, Any]]:
    """Each run's config as `dotted.key -> value`, the runs' keys lined up: mappings by key, lists of
    tables (systems, judges) by `_aligned`, so a key names the same thing in every run."""
    out: list[dict[str, Any]] = [{} for _ in values]
    present = [v for v in values if v is not _MISSING]

    def merge(parts: list[dict[str, Any]]) -> None:
        for mine, part in zip(out, parts):
            mine.update(part)

    if present and all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        if not keys:
            for mine, v in zip(out, values):
                if v is not _MISSING:
                    mine[prefix] = {}
        for key in keys:
            merge(
                _flatten_runs(
                    [v.get(key, _MISSING) if isinstance(v, dict) else _MISSING for v in values],
                    f"{prefix}.{key}" if prefix else str(key),
                )
            )
    elif any(_is_table_list(v) for v in present) and all(_is_table_list(v) or v == [] for v in present):
        for label, items in _aligned([v if v not in (_MISSING, []) else [] for v in values]):
            key = f"{prefix}[{label}]"
            if any(item is _MISSING for item in items):  # in some runs only: the item is one row, not one per key
                for mine, item in zip(out, items):
                    if item is not _MISSING:
                        mine[key] = item
            else:
                merge(_flatten_runs(items, key))
    else:
        for mine, v in zip(out, values):
            if v is not _MISSING:
                mine[prefix] = v
    return out


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


ABSENT = "(absent)"


def config_diff(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' resolved configs side by side, one row per key (the recipe's keys, the number of
    cases, the package versions), `differs` where the runs disagree; keys in first-seen order. A
    system (judge, paper row) is one key prefix in every run — by its name, or, renamed, by its
    place among those not named alike — so a rename is one row, not one per option."""
    flat = _flatten_runs(
        [
            {
                "recipe": config["recipe"],
                "cases": f"{len(config['cases'])} cases",
                "versions": config.get("versions") or {},
            }
            for config in configs
        ]
    )
    flat = [{key.removeprefix("recipe."): value for key, value in one.items()} for one in flat]
    keys = list(dict.fromkeys(key for one in flat for key in one))
    rows = []
    for key in keys:
        secret = key.rsplit(".", 1)[-1] == "api_key"  # a key set in a recipe is never shown, only that it is set
        values = [ABSENT if key not in one else ("(set)" if secret and one[key] else _shown(one[key])) for one in flat]
        rows.append({"key": key, "values": values, "differs": len(set(values)) > 1})
    return {"rows": rows, "differing": sum(row["differs"] for row in rows)}


def cases_side_by_side(runs: list[dict[str, Any]], labels: list[str], judges: list[str]) -> list[dict[str, Any]]:
    """Per case (benchmark, case id) in any run: each (run, system)'s response excerpt and scores
    (the mean over its epochs when it ran more than one), or why it has none."""
    entries = [(label, system, run) for label, run in zip(labels, runs) for system in run["summary"]["systems"]]
    grouped: dict[tuple[str, str, str], list[ResultRecord]] = {}
    for label, run in zip(labels, runs):
        for record in run["records"]:
            grouped.setdefault((label, record.system, record.case_id), []).append(record)
    case_ids = sorted({(r.benchmark, r.case_id) for run in runs for r in run["records"]})
    out = []
    for benchmark, case_id in case_ids:
        cells: list[dict[str, Any]] = []
        for label, system, _ in entries:
            records = sorted(grouped.get((label, system, case_id), []), key=lambda r: r.epoch)
            ok = [r for r in records if r.ok]
            scores: dict[str, float | None] = {}
            for judge in judges:
                values = [score for r in ok if (score := r.scores.get(judge)) is not None]
                scores[judge] = math.fsum(values) / len(values) if values else None
            text = response_parts(ok[0])[0] if ok else ""
            cells.append(
                {
                    "entry": f"{label}:{system}",
                    "status": "ok" if ok else ("failed" if records else "not run"),
                    "error": next((r.error for r in records if not r.ok), None),
                    "epochs": len(records),
                    "excerpt": text[:EXCERPT_CHARS] + ("…" if len(text) > EXCERPT_CHARS else ""),
                    "scores": scores,
                    "kinds": sorted({d.kind for r in ok for d in r.degraded}),
                }
            )
        out.append(
            {
                "benchmark": benchmark,
                "id": case_id,
                "cells": cells,
                "scores": {cell["entry"]: cell["scores"] for cell in cells},  # what the page sorts and filters by
                "kinds": sorted({k for cell in cells for k in cell["kinds"]}),
            }
        )
    return out


def _scores(records: list[ResultRecord], system: str, judge: str) -> dict[tuple[str, str], float]:
    """(benchmark, case id) -> score; with epochs, the case's mean over its scored epochs."""
    by_case: dict[tuple[str, str], list[float]] = {}
    for r in records:
        score = r.scores.get(judge)
        if r.system == system and r.ok and score is not None:
            by_case.setdefault((r.benchmark, r.case_id), []).append(score)
    return {case: math.fsum(values) / len(values) for case, values in by_case.items()}


def _case_clusters(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, str]] | None:
    """(benchmark, case id) -> the case's clusters, from the runs' cases loaded again (None when
    none of them can be: the paired tests then take cases as independent)."""
    from atelier.runs.reading.finish import run_cases

    out: dict[tuple[str, str], dict[str, str]] = {}
    for run in runs:
        benchmark = run["summary"]["benchmark"].get("name")
        out.update({(benchmark, case_id): case.clusters for case_id, case in run_cases(run["config"]).items()})
    return out or None


def _refuse_mixed_scales(runs: list[dict[str, Any]], labels: list[str], judges: list[str]) -> None:
    """Refuse runs whose scores of one judge were recorded on different scales (each judgment records
    its judge's declared scale in results.jsonl: 1-5 in one run, 0-100 in another): their difference,
    and the difference of their effects, would subtract numbers that measure on different scales."""
    problems = []
    for judge in judges:
        where: dict[str, list[str]] = {}  # scale -> the runs recording a score of `judge` on it
        for label, run in zip(labels, runs):
            for record in run["records"] + run["controls"]:
                for judgment in record.judgments:
                    if judgment.judge == judge and not judgment.failed and judgment.score is not None:
                        runs_on = where.setdefault(judgment.scale, [])
                        if label not in runs_on:
                            runs_on.append(label)
        if len(where) > 1:
            said = "; ".join(f"{scale} in {', '.join(on)}" for scale, on in where.items())
            problems.append(f"judge {judge!r} scored on different scales ({said})")
    if problems:
        raise ConfigError(
            "\n  ".join(["these runs' scores cannot be compared: a judge's scale differs between them", *problems])
        )


def compare_runs(run_dirs: list[Path], *, baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Every (run, system) of `run_dirs` against the baseline entry (`run_id:system`, default the first)."""
    if len(run_dirs) < 2:
        raise ConfigError("compare needs two or more run folders")
    runs = [_load(Path(d)) for d in run_dirs]
    labels = [r["run_id"] for r in runs]
    if len(set(labels)) < len(labels):  # the same run id twice (copied folders): use the folder names
        labels = [Path(r["dir"]).name for r in runs]
    judges = list(dict.fromkeys(j for r in runs for j in r["summary"].get("judges", [])))
    _refuse_mixed_scales(runs, labels, judges)
    entries = []
    for label, run in zip(labels, runs):
        for system, stats in run["summary"]["systems"].items():
            calls = stats.get("usage", {}).get("calls", {}).get("system")
            entries.append(
                {
                    "id": f"{label}:{system}",
                    "run": label,
                    "system": system,
                    "benchmark": run["summary"]["benchmark"].get("name"),
                    "dry_run": run["summary"].get("dry_run", False),
                    "n": stats["n"],
                    "errors": stats["errors"],
                    # what degraded (and in how many episodes), every kind: memory, the system's steps and
                    # its judges'; a score on less web or less memory than asked for, or from a gated judge,
                    # is no improvement, whatever its value
                    **_degraded_of(run["records"], system),
                    "judges": {j: stats["judges"].get(j) for j in judges},
                    "cost": format_cost(calls) if calls else "–",
                    "scores": {j: _scores(run["records"], system, j) for j in judges},
                }
            )
    ids = [e["id"] for e in entries]
    if baseline is not None and baseline not in ids:
        raise ConfigError(f"--baseline {baseline!r} is not one of: {', '.join(ids)}")
    base = next(e for e in entries if e["id"] == (baseline or ids[0]))
    clusters = _case_clusters(runs)
    rows = []
    for judge in judges:
        for entry in entries:
            if entry is base:
                continue
            row = paired_row(entry["scores"][judge], base["scores"][judge], seed=seed, clusters=clusters)
            if row is not None:
                rows.append({"judge": judge, "entry": entry["id"], **row})
    for entry in entries:
        del entry["scores"]
    personalized = across_runs(
        [(label, run["summary"], run["records"] + run["controls"]) for label, run in zip(labels, runs)],
        base["id"],
        seed=seed,
        clusters=clusters,
    )
    return {
        "personalization": personalized,
        "config_diff": config_diff([r["config"] for r in runs]),
        "cases": cases_side_by_side(runs, labels, judges),
        "runs": [
            {"label": label, "dir": r["dir"], "recipe": r["config"]["recipe"]["name"]} for label, r in zip(labels, runs)
        ],
        "judges": judges,
        "entries": entries,
        "baseline": base["id"],
        "correction": CORRECTION,
        "comparisons": adjust(rows),
    }


def _degraded_of(records: list[ResultRecord], system: str) -> dict[str, Any]:
    """Every degradation kind of `system`'s episodes (memory, pipeline, judges) with its count, and
    how many episodes degraded."""
    mine = [r for r in records if r.system == system and r.ok]
    return {
        "degraded": counts_by_kind(d for r in mine for d in r.degraded),
        "degraded_episodes": sum(1 for r in mine if r.degraded),
    }


def _mean_ci(stats: dict[str, Any] | None) -> str:
    if not stats or stats.get("mean") is None:
        return "–"
    return f"{stats['mean']:.3f} {ci_text(stats.get('ci95'), stats['n'])} n={stats['n']}"


def comparison_charts(comparison: dict[str, Any]) -> dict[str, str | None]:
    """The page's plots: every entry's mean with its 95% CI per judge, and every entry's paired
    difference from the baseline with its 95% CI per judge (0: no difference)."""
    means: dict[str, list[Point]] = {}
    for judge in comparison["judges"]:
        means[judge] = []
        for e in comparison["entries"]:
            stats = e["judges"].get(judge) or {}
            low, high = stats.get("ci95") or [None, None]
            means[judge].append(Point(label=e["id"], mean=stats.get("mean"), low=low, high=high, n=stats.get("n", 0)))
    differences: dict[str, list[Point]] = {}
    for row in comparison["comparisons"]:
        differences.setdefault(row["judge"], []).append(
            Point(label=row["entry"], mean=row["mean_difference"], low=row["ci_low"], high=row["ci_high"], n=row["n"])
        )
    return {
        "means": dot_plot(means, xlabel="mean score (95% CI)", gid="compare-dots"),
        "differences": dot_plot(
            differences,
            xlabel=f"difference from {comparison['baseline']} (95% CI)",
            gid="difference-dots",
            reference=0.0,
        ),
    }


def degraded_text(entry: dict[str, Any]) -> str:
    """`3 episodes: fetch_failed 4, search_failed 2`, or `0`."""
    if not entry["degraded"]:
        return "0"
    kinds = ", ".join(f"{kind} {n}" for kind, n in entry["degraded"].items())
    return f"{entry['degraded_episodes']} episode{'s' * (entry['degraded_episodes'] != 1)}: {kinds}"


def print_comparison(comparison: dict[str, Any], console) -> None:
    from rich.table import Table

    from atelier.runs.reading.terminal_text import cells

    table = Table(title="systems x judges: mean [95% CI] n")
    for column in ("run", "system", *comparison["judges"], "failed", "degraded", "system cost"):
        table.add_column(column, overflow="fold")  # a name wraps on a narrow terminal, never cut
    for e in comparison["entries"]:
        table.add_row(
            *cells(
                e["run"],
                e["system"] + (" (dry run)" if e["dry_run"] else ""),
                *(_mean_ci(e["judges"][j]) for j in comparison["judges"]),
                str(e["errors"]),
                degraded_text(e),
                e["cost"],
            )
        )
    console.print(table)
    differing = [row["key"] for row in comparison["config_diff"]["rows"] if row["differs"]]
    if differing:  # the page sets them side by side (--html)
        shown = ", ".join(differing[:8]) + (f", and {len(differing) - 8} more" if len(differing) > 8 else "")
        console.print(
            f"configs differ in {len(differing)} key{'s' * (len(differing) != 1)}: {shown}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    print_personalization(comparison["personalization"], console)
    if not comparison["comparisons"]:
        console.print(f"no paired comparisons: no entry shares two or more scored cases with {comparison['baseline']}")
        return
    paired = Table(
        title=f"paired on shared cases, against {comparison['baseline']} "
        f"(p adjusted together: {comparison['correction']})"
    )
    for column in ("judge", "entry", "pairs", "difference", "95% CI", "p", "adjusted p"):
        paired.add_column(column, overflow="fold")
    for c in comparison["comparisons"]:
        paired.add_row(
            *cells(
                c["judge"],
                c["entry"],
                str(c["n"]),
                f"{c['mean_difference']:+.3f}",
                difference_ci_text(c),
                f"{c['permutation_p']:.3g}" if c["permutation_p"] is not None else "–",
                (f"{c['p_adjusted']:.3g}" + (" *" if c["significant"] else "")) if c["p_adjusted"] is not None else "–",
            )
        )
    console.print(paired)
    for line in [CI_AGREES, *(f"untestable: {u}" for u in untestable_notes(comparison["comparisons"], "entry"))]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _effect_table(title: str, rows: list[dict[str, Any]], effect: str):
    """A table of personalization effects (or of differences between them), one row each."""
    from rich.table import Table

    from atelier.runs.reading.terminal_text import cells

    table = Table(title=title)
    for column in ("entry", "judge", "control", "pairs", effect, "95% CI", "adjusted p"):
        table.add_column(column, overflow="fold")
    for row in rows:
        p = row.get("p_adjusted")
        table.add_row(
            *cells(
                row["entry"],
                row["judge"],
                row["control"],
                str(row["n"]),
                "–" if row["mean_difference"] is None else f"{row['mean_difference']:+.3f}",
                difference_ci_text(row),
                "–" if p is None else f"{p:.3g}" + (" *" if row.get("significant") else ""),
            )
        )
    return table


def print_personalization(personalized: dict[str, Any], console) -> None:
    """Each run's personalization effects (own − control, with their intervals) and each entry's
    effect against the baseline's; nothing when no run had controls."""
    if not personalized["effects"]:
        return
    title = "personalization effect: own − control (95% CI), headline scores"
    console.print(_effect_table(title, personalized["effects"], "effect"))
    if personalized["versus_baseline"]:
        title = (
            f"effect against {personalized['baseline']}'s effect, paired on shared cases "
            f"(p adjusted together: {personalized['correction']})"
        )
        console.print(_effect_table(title, personalized["versus_baseline"], "difference of effects"))


def write_comparison_html(comparison: dict[str, Any], path: str | Path) -> None:
    env = environment()
    env.filters["mean_ci"] = _mean_ci
    env.filters["degraded"] = degraded_text
    kinds = sorted({k for case in comparison["cases"] for k in case["kinds"]})
    env.filters["difference_ci"] = difference_ci_text
    env.globals["ci_agrees"] = CI_AGREES
    env.globals["untestable"] = untestable_notes
    html = env.get_template("compare.html.j2").render(
        c=comparison,
        charts=comparison_charts(comparison),
        excerpt_chars=EXCERPT_CHARS,
        filter_kinds=kinds + [k for k in KINDS if k not in kinds],
        present_kinds=set(kinds),
    )
    write_atomically(path, html)  # keys redacted; a link in its place is replaced, not written through
