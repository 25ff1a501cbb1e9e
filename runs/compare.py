"""`atelier compare RUN_DIR...`: runs side by side. One row per (run, system), one column per judge
(mean, 95% CI, n, from each run's summary.json); every entry paired with the baseline entry on the
cases both were scored on (same benchmark and case id), permutation p-values adjusted together
(`runs.comparisons`). `--html` writes the same as a page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common.errors import ConfigError
from runs.comparisons import CORRECTION, adjust, paired_row
from runs.results import ResultRecord, ResultsFile
from runs.usage import format_cost

TEMPLATE_DIR = Path(__file__).parent / "templates"


def _load(run_dir: Path) -> dict[str, Any]:
    from runs.runner import RunFolder, load_run_config

    config = load_run_config(run_dir)
    folder = RunFolder(Path(run_dir))
    if not folder.summary.exists():
        raise ConfigError(f"{run_dir} has no summary.json yet; write it with `atelier report {run_dir}`")
    import json

    summary = json.loads(folder.summary.read_text(encoding="utf-8"))
    wanted = set(config["cases"])
    records = [r for r in ResultsFile(folder.results).load().values() if r.case_id in wanted]
    return {"dir": str(run_dir), "run_id": config["run_id"], "config": config, "summary": summary, "records": records}


def _scores(records: list[ResultRecord], system: str, judge: str) -> dict[tuple[str, str], float]:
    return {
        (r.benchmark, r.case_id): r.scores[judge]
        for r in records
        if r.system == system and r.ok and r.scores.get(judge) is not None
    }


def compare_runs(run_dirs: list[Path], *, baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Every (run, system) of `run_dirs` against the baseline entry (`run_id:system`, default the first)."""
    if len(run_dirs) < 2:
        raise ConfigError("compare needs two or more run folders")
    runs = [_load(Path(d)) for d in run_dirs]
    labels = [r["run_id"] for r in runs]
    if len(set(labels)) < len(labels):  # the same run id twice (copied folders): use the folder names
        labels = [Path(r["dir"]).name for r in runs]
    judges = list(dict.fromkeys(j for r in runs for j in r["summary"].get("judges", [])))
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
                    # what degraded in the system's steps (and in how many episodes): a score on less web or
                    # less memory than asked for is no improvement, whatever its value
                    "degraded": stats.get("degraded", {}),
                    "degraded_episodes": stats.get("degraded_episodes", 0),
                    "judges": {j: stats["judges"].get(j) for j in judges},
                    "cost": format_cost(calls) if calls else "–",
                    "scores": {j: _scores(run["records"], system, j) for j in judges},
                }
            )
    ids = [e["id"] for e in entries]
    if baseline is not None and baseline not in ids:
        raise ConfigError(f"--baseline {baseline!r} is not one of: {', '.join(ids)}")
    base = next(e for e in entries if e["id"] == (baseline or ids[0]))
    rows = []
    for judge in judges:
        for entry in entries:
            if entry is base:
                continue
            row = paired_row(entry["scores"][judge], base["scores"][judge], seed=seed)
            if row is not None:
                rows.append({"judge": judge, "entry": entry["id"], **row})
    for entry in entries:
        del entry["scores"]
    return {
        "runs": [
            {"label": label, "dir": r["dir"], "recipe": r["config"]["recipe"]["name"]} for label, r in zip(labels, runs)
        ],
        "judges": judges,
        "entries": entries,
        "baseline": base["id"],
        "correction": CORRECTION,
        "comparisons": adjust(rows),
    }


def _mean_ci(stats: dict[str, Any] | None) -> str:
    if not stats or stats.get("mean") is None:
        return "–"
    low, high = stats["ci95"]
    ci = f" [{low:.3f}, {high:.3f}]" if low is not None else ""
    return f"{stats['mean']:.3f}{ci} n={stats['n']}"


def degraded_text(entry: dict[str, Any]) -> str:
    """`3 episodes: fetch_failed 4, search_failed 2`, or `0`."""
    if not entry["degraded"]:
        return "0"
    kinds = ", ".join(f"{kind} {n}" for kind, n in entry["degraded"].items())
    return f"{entry['degraded_episodes']} episode{'s' * (entry['degraded_episodes'] != 1)}: {kinds}"


def print_comparison(comparison: dict[str, Any], console) -> None:
    from rich.table import Table

    table = Table(title="systems x judges: mean [95% CI] n")
    for column in ("run", "system", *comparison["judges"], "failed", "degraded", "system cost"):
        table.add_column(column)
    for e in comparison["entries"]:
        table.add_row(
            e["run"],
            e["system"] + (" (dry run)" if e["dry_run"] else ""),
            *(_mean_ci(e["judges"][j]) for j in comparison["judges"]),
            str(e["errors"]),
            degraded_text(e),
            e["cost"],
        )
    console.print(table)
    if not comparison["comparisons"]:
        console.print(f"no paired comparisons: no entry shares two or more scored cases with {comparison['baseline']}")
        return
    paired = Table(
        title=f"paired on shared cases, against {comparison['baseline']} "
        f"(p adjusted together: {comparison['correction']})"
    )
    for column in ("judge", "entry", "pairs", "difference", "95% CI", "p", "adjusted p"):
        paired.add_column(column)
    for c in comparison["comparisons"]:
        paired.add_row(
            c["judge"],
            c["entry"],
            str(c["n"]),
            f"{c['mean_difference']:+.3f}",
            f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}]",
            f"{c['permutation_p']:.3g}" if c["permutation_p"] is not None else "–",
            (f"{c['p_adjusted']:.3g}" + (" *" if c["significant"] else "")) if c["p_adjusted"] is not None else "–",
        )
    console.print(paired)


def write_comparison_html(comparison: dict[str, Any], path: str | Path) -> None:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(["html", "j2"]))
    env.filters["mean_ci"] = _mean_ci
    env.filters["degraded"] = degraded_text
    Path(path).write_text(env.get_template("compare.html.j2").render(c=comparison), encoding="utf-8")
