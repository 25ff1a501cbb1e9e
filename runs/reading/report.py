"""report.html: a self-contained page (no network needed to open it) a researcher would rather read
than the JSON: per system n / mean / CI / cost / tokens / latency / failures; score distributions;
paired comparisons against the baseline, corrected for multiple comparisons; cost against score;
the paper's numbers beside ours; and per case the query, the recalled memory and the systems side
by side with their responses, sources and rendered judge details. Every number on it comes from
summary.json (tables) or results.jsonl (cases); `atelier report RUN_DIR` renders it again.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import KINDS, counts_by_kind
from atelier.runs.folder.results import ResultRecord, result_key
from atelier.runs.reading.comparisons import scores_by_case, tool_recalls
from atelier.runs.reading.usage import format_cost

TEMPLATE_DIR = Path(__file__).parent / "templates"
WIDE_INDEX = 8  # more systems x judges than this: the case index gets a row per (case, system), not a column
_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


# ----------------------------------------------------------------------------- charts (inline SVG)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    """The figure as inline SVG, its text kept as text (searchable, and countable by a test)."""
    buffer = io.StringIO()
    with _pyplot().rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg")
    _pyplot().close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


def _judged(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    systems = list(summary["systems"])
    judges = [
        j
        for j in summary.get("judges", [])
        if any(s["judges"].get(j, {}).get("n") for s in summary["systems"].values())
    ]
    return systems, judges


class Point(BaseModel):
    """One row of a dot plot: a system's (or a run's system's) mean with its 95% CI over n cases."""

    label: str
    mean: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0


def _grid(panels: int, rows: int, plt, *, label_chars: int = 20):
    """Small multiples: at most three panels a line (two when each has many rows), each as tall as
    its rows need, so 40 labels never overlap, and as wide as its longest label needs."""
    columns = max(1, min(panels, 3 if rows <= 12 else 2))
    panel_width = max(4.5, 3.2 + 0.07 * label_chars)
    lines = -(-panels // columns)
    fig, axes = plt.subplots(
        lines,
        columns,
        figsize=(panel_width * columns, (0.9 + 0.24 * rows) * lines),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:panels])


def dot_plot(panels: dict[str, list[Point]], *, xlabel: str, gid: str, reference: float | None = None) -> str | None:
    """A sorted dot plot per panel (a judge, a metric): one row per system, best mean on top, the
    mean as a dot and its 95% CI as a whisker; a hollow dot is one case (no CI). Systems with no
    score are left out and counted in the panel's title. Each y label is an SVG group
    `<gid>-<panel>-label-<i>`, so the page (and a test) can find every system's row."""
    measured = {title: [p for p in points if p.mean is not None] for title, points in panels.items()}
    shown = [title for title, points in measured.items() if points]
    if not shown:
        return None
    plt = _pyplot()
    longest = max(len(p.label) for t in shown for p in measured[t])
    fig, axes = _grid(len(shown), max(len(measured[t]) for t in shown), plt, label_chars=longest)
    for index, (ax, title) in enumerate(zip(axes, shown)):
        points = sorted(measured[title], key=lambda p: (-(p.mean or 0.0), p.label))
        ys = list(range(len(points)))
        for y, point in zip(ys, points):
            mean = point.mean or 0.0
            if point.n >= 2 and point.low is not None and point.high is not None:
                ax.errorbar(
                    [mean], [y], xerr=[[mean - point.low], [point.high - mean]], fmt="o", color=_PALETTE[0], capsize=3
                )
            else:
                ax.scatter([mean], [y], s=30, facecolors="white", edgecolors=_PALETTE[0], zorder=3)
        ax.set_yticks(ys, [p.label for p in points], fontsize=8)
        for i, label in enumerate(ax.get_yticklabels()):
            label.set_gid(f"{gid}-{index}-label-{i}")
        ax.set_ylim(len(points) - 0.5, -0.5)  # the best on top
        if reference is not None:
            ax.axvline(reference, color="#999", linewidth=0.8, linestyle="--")
        left_out = len(panels[title]) - len(points)
        ax.set_title(title + (f" ({left_out} not measured)" if left_out else ""), fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(axis="x", color="#eee")
        ax.spines[["top", "right"]].set_visible(False)
    return _svg(fig)


def score_points(summary: dict[str, Any]) -> dict[str, list[Point]]:
    """Per judge, each system's mean and 95% CI from summary.json."""
    systems, judges = _judged(summary)
    panels: dict[str, list[Point]] = {}
    for judge in judges:
        panels[judge] = []
        for system in systems:
            stats = summary["systems"][system]["judges"].get(judge) or {}
            low, high = stats.get("ci95") or [None, None]
            panels[judge].append(Point(label=system, mean=stats.get("mean"), low=low, high=high, n=stats.get("n", 0)))
    return panels


def _score_chart(summary: dict[str, Any]) -> str | None:
    """Mean score with its 95% CI per system, a sorted dot plot per judge."""
    return dot_plot(score_points(summary), xlabel="mean score (95% CI)", gid="score-dots")


def _distribution_chart(summary: dict[str, Any], records: list[ResultRecord]) -> str | None:
    """Each system's per-case scores per judge: a horizontal box plot with every case as a point,
    systems sorted by median (highest on top), one panel per judge."""
    import numpy as np

    systems, judges = _judged(summary)
    if not systems or not judges:
        return None
    plt = _pyplot()
    fig, axes = _grid(len(judges), len(systems), plt, label_chars=max(len(s) for s in systems))
    rng = np.random.default_rng(0)
    for ax, judge in zip(axes, judges):
        data = {
            s: [score for r in records if r.system == s and r.ok and (score := r.scores.get(judge)) is not None]
            for s in systems
        }
        ordered = sorted((s for s in systems if data[s]), key=lambda s: (-float(np.median(data[s])), s))
        if not ordered:
            ax.set_visible(False)
            continue
        ys = list(range(len(ordered)))
        ax.boxplot([data[s] for s in ordered], positions=ys, widths=0.5, showfliers=False, orientation="horizontal")
        for y, system in zip(ys, ordered):
            values = data[system]
            jitter = rng.uniform(-0.15, 0.15, len(values))
            ax.scatter(values, np.full(len(values), y) + jitter, s=10, alpha=0.6, color=_PALETTE[y % len(_PALETTE)])
        ax.set_yticks(ys, ordered, fontsize=8)
        ax.set_ylim(len(ordered) - 0.5, -0.5)
        ax.set_title(f"{judge}: per-case scores", fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
    return _svg(fig)


NAMED_POINTS = 8  # a cost chart with more systems marks its points by number, named in a key beneath


def _cost_chart(summary: dict[str, Any]) -> tuple[str | None, str, list[tuple[int, str]]]:
    """Mean score against what the system's own model calls cost per episode (USD when every call
    was priced, else tokens); with many systems the points carry numbers and the key names them
    (names at 40 points overlap into ink)."""
    systems, judges = _judged(summary)
    points = {s: _system_calls(summary, s) for s in systems}
    if not systems or not judges or not any(p["provider_calls"] or p["calls"] for p in points.values()):
        return None, "", []
    numbered = len(systems) > NAMED_POINTS
    priced = all(p["cost_usd"] is not None and not p["unpriced_calls"] for p in points.values()) and any(
        p["cost_usd"] for p in points.values()
    )
    axis = "USD per episode" if priced else "tokens per episode (prompt + completion)"
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(judges), figsize=(4.8 * len(judges), 3.6), squeeze=False)
    for ax, judge in zip(axes[0], judges):
        for i, system in enumerate(systems):
            mean = summary["systems"][system]["judges"].get(judge, {}).get("mean")
            episodes = summary["systems"][system]["n"] + summary["systems"][system]["errors"]
            if mean is None or not episodes:
                continue
            calls = points[system]
            x = (calls["cost_usd"] if priced else calls["prompt_tokens"] + calls["completion_tokens"]) / episodes
            ax.scatter([x], [mean], s=40 if not numbered else 24, color=_PALETTE[i % len(_PALETTE)])
            label = str(i + 1) if numbered else system
            ax.annotate(label, (x, mean), textcoords="offset points", xytext=(4, 3), fontsize=8 if not numbered else 7)
        ax.set_xlabel(axis)
        ax.set_ylabel(f"mean {judge}")
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return _svg(fig), axis, [(i + 1, s) for i, s in enumerate(systems)] if numbered else []


# ----------------------------------------------------------------------------- view helpers


_EMPTY_CALLS = {
    "calls": 0,
    "provider_calls": 0,
    "cache_hits": 0,
    "errors": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "cost_usd": 0.0,
    "unpriced_calls": 0,
}


def _system_calls(summary: dict[str, Any], system: str, kind: str = "system") -> dict[str, Any]:
    return summary["systems"][system].get("usage", {}).get("calls", {}).get(kind, _EMPTY_CALLS)


def response_parts(record: ResultRecord) -> tuple[str, list[dict[str, Any]]]:
    """A record's response text and citations, whether it stores the text or the whole response."""
    response: Any = record.response
    if response is None:
        return "", []
    if isinstance(response, str):
        return response, []
    data = response if isinstance(response, dict) else response.model_dump(mode="json")
    return data.get("text", ""), list(data.get("citations") or [])


def _number(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def ci_text(ci95: Any, n: int | None) -> str:
    """A 95% CI as the page shows it: `[0.512, 0.688]`; one case has none, and says so."""
    if not n:
        return "–"
    if n == 1:
        return "one case, no CI"
    low, high = ci95 or (None, None)
    if low is None or high is None:
        return "no CI"
    return f"[{_number(low)}, {_number(high)}]"


def difference_ci_text(row: Any) -> str:
    """A paired difference's 95% CI (the interval that inverts its test): `[-0.550, -0.092]`, or
    `unbounded` when the design's test cannot reject at 5% (its smallest p is not below it)."""
    if not row.get("n") or row.get("mean_difference") is None:
        return "–"
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is None or high is None:
        return "unbounded"
    return f"[{_number(low)}, {_number(high)}]"


# said under every table of paired differences: what the interval and the two p-values are
CI_AGREES = (
    "The 95% CI inverts the test: it excludes 0 exactly when the unadjusted p is below 0.05; "
    "'significant' reads the adjusted p (Benjamini-Hochberg over the table's comparisons)."
)


def untestable_notes(rows: list[dict[str, Any]], label: str) -> list[str]:
    """One line per comparison whose test cannot reject at 5% with its design (no interval, no MDE)."""
    out = []
    for row in rows:
        if row.get("n") and row.get("testable") is False:
            why = next((note for note in row.get("cluster_notes") or [] if "smallest p" in note), "untestable")
            out.append(f"{row.get('judge')} / {row.get(label)}: {why}")
    return out


def unequal_n_note(summary: dict[str, Any]) -> str | None:
    """A note when a judge scored the systems on different numbers of cases (a run its budget
    stopped, failures): their means then rest on different cases, side by side in one table."""
    uneven = []
    for judge in summary.get("judges") or []:
        counts = {
            name: (entry.get("judges", {}).get(judge) or {}).get("n", 0) for name, entry in summary["systems"].items()
        }
        if len(set(counts.values())) > 1:
            uneven.append(f"{judge}: " + ", ".join(f"{name} {n}" for name, n in counts.items()))
    if not uneven:
        return None
    why = " (the budget stopped the run)" if (summary.get("budget") or {}).get("reached") else ""
    return (
        f"the systems' means rest on different numbers of cases{why} — {'; '.join(uneven)}: they are not "
        "compared on the same cases; the paired comparisons are (on the cases both were scored on)"
    )


def interval_warnings(summary: dict[str, Any]) -> list[str]:
    """What the terminal says under a run's table about its intervals: too few clusters for them to
    keep their coverage, and comparisons whose test cannot reject at 5%."""
    design = summary.get("clusters") or {}
    lines = []
    if design.get("warning"):
        lines.append(
            f"warning: {design['warning']}: with so few clusters, 95% intervals were measured to cover less "
            "than 93% of the time for some scores (docs/statistics.md)"
        )
    rows = [{**row, "pair": f"{row.get('a')} - {row.get('b')}"} for row in summary.get("comparisons") or []]
    lines += [f"untestable: {line}" for line in untestable_notes(rows, "pair")]
    uneven = unequal_n_note(summary)
    return lines + ([f"note: {uneven}"] if uneven else [])


def paper_tables(paper: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's paper rows pivoted: one table per (our system, judge), one row per metric, a
    column per paper row that system stands for, then ours with its 95% CI and n. Ours is the same
    for every paper row of one system, so it is shown once."""
    groups: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in paper:
        group = groups.setdefault(
            (row["system"], row.get("judge")),
            {"system": row["system"], "judge": row.get("judge"), "columns": [], "metrics": {}},
        )
        if row["row"] not in group["columns"]:
            group["columns"].append(row["row"])
        metric = group["metrics"].setdefault(
            row["metric"],
            {"metric": row["metric"], "paper": {}, "ours": row["ours"], "ci95": row.get("ci95"), "n": row["n"]},
        )
        metric["paper"][row["row"]] = row["paper"]
    return [{**group, "metrics": list(group["metrics"].values())} for group in groups.values()]


def context_share_rows(records: list[ResultRecord], systems: list[str]) -> list[dict[str, Any]]:
    """Per system whose memory packs events under a budget: the budget(s), how much of the offered
    context was kept (mean and least share of tokens) and in how many episodes it was cut ([] when
    no system reports a share). PDR gives context systems the whole context: a cut is shown here."""
    rows = []
    for system in systems:
        shares = [
            r.user_context.share for r in records if r.system == system and r.user_context and r.user_context.share
        ]
        if not shares:
            continue
        rows.append(
            {
                "system": system,
                "budgets": sorted({s.budget_tokens for s in shares}),
                "episodes": len(shares),
                "mean_share": math.fsum(s.share for s in shares) / len(shares),
                "least_share": min(s.share for s in shares),
                "cut": sum(1 for s in shares if s.events_kept < s.events_offered),
                "tokens_offered": round(math.fsum(s.tokens_offered for s in shares) / len(shares)),
            }
        )
    return rows


def epoch_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (system, judge), how far its scores moved between epochs (`epoch_spread` in summary.json,
    written when each (case, system) ran more than once); [] for a run of one epoch."""
    return [
        {"system": system, "judge": judge, **stats["epoch_spread"]}
        for system, entry in summary["systems"].items()
        for judge, stats in entry["judges"].items()
        if stats.get("epoch_spread")
    ]


def variance_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (system, judge) with scores, its variance split into between-case, between-epoch and
    between-judge-repeat parts (`variance` in summary.json)."""
    return [
        {"system": system, "judge": judge, **stats["variance"]}
        for system, entry in summary["systems"].items()
        for judge, stats in entry["judges"].items()
        if stats.get("variance") and stats["variance"].get("n_cases")
    ]


def cluster_methods(summary: dict[str, Any]) -> list[str]:
    """The interval methods the cells used, each once (clustered designs name their clusters)."""
    methods = [stats.get("ci_method") for entry in summary["systems"].values() for stats in entry["judges"].values()]
    return list(dict.fromkeys(m for m in methods if m))


_STANDARD = {
    "n",
    "mean",
    "ci95",
    "failed",
    "flags",
    "mean_repeat_std",
    "criteria",
    "case_means",
    "epoch_spread",
    "ci_method",
    "n_clusters",
    "design_effect",
    "mde",
    "cluster_notes",
    "variance",
}


def judge_figures(summary: dict[str, Any], judge: str) -> dict[str, Any]:
    """A judge's own system-level figures (its `aggregate`): criterion means as a systems x criteria
    table, and whatever else it reports (pooled reliability, per-category tables...) per system."""
    names: list[str] = []
    rows, extras = {}, {}
    for system, entry in summary["systems"].items():
        stats = entry["judges"].get(judge) or {}
        criteria = stats.get("criteria") or {}
        names += [name for name in criteria if name not in names]
        rows[system] = criteria
        other = {k: v for k, v in stats.items() if k not in _STANDARD and v not in (None, {}, [])}
        if stats.get("flags"):
            other["flags"] = stats["flags"]
        if other:
            extras[system] = other
    return {"names": names, "rows": rows, "extras": extras}


def _columns(value: Any) -> list[str]:
    """The columns of a list of mappings (their keys, in first-seen order); [] for anything else."""
    if not isinstance(value, list) or not value or not all(isinstance(item, dict) for item in value):
        return []
    return list(dict.fromkeys(key for item in value for key in item))


def anchor(text: str) -> str:
    """An HTML id for a case or a (case, system) cell."""
    return "".join(ch if ch.isalnum() else "-" for ch in text)


def cell_anchor(key: str) -> str:
    """The id of the cell of result key `<case>::<system>` in the per-case view."""
    return "cell-" + anchor(key)


def _epoch_view(record: ResultRecord) -> dict[str, Any]:
    """One epoch's response in a (case, system) cell of the per-case view."""
    text, citations = response_parts(record)
    return {
        "record": record,
        "text": text,
        "citations": citations,
        "recalls": tool_recalls(record),  # its recall_memory calls
        "anchor": cell_anchor(result_key(record.case_id, record.system, record.epoch)),
    }


def _cases_view(
    records: list[ResultRecord], cases: dict[str, Case], systems: list[str], judges: list[str]
) -> list[dict[str, Any]]:
    """Per case, a cell per system holding every epoch's response (`epochs`, in epoch order) and, per
    judge, the score the summary counts for the case: with epochs, the mean over its scored epochs
    (`scores`, from `scores_by_case` as in the summary; `scored` says over how many)."""
    by_case: dict[str, dict[str, list[ResultRecord]]] = defaultdict(lambda: defaultdict(list))
    for each in sorted(records, key=lambda r: (r.case_id, r.system, r.epoch)):
        by_case[each.case_id][each.system].append(each)
    out = []
    for case_id in sorted(by_case):
        case = cases.get(case_id)
        first = next(iter(by_case[case_id].values()))[0]
        cells = []
        for system in systems:
            runs = by_case[case_id].get(system, [])
            degraded = [r for r in runs if r.ok and r.degraded]
            cells.append(
                {
                    "system": system,
                    "epochs": [_epoch_view(r) for r in runs],
                    "ok": any(r.ok for r in runs),
                    "scores": {j: scores_by_case(runs, system, j).get(case_id) for j in judges},
                    "scored": {j: sum(1 for r in runs if r.ok and r.scores.get(j) is not None) for j in judges},
                    # where the index's ⚠ leads: the first epoch that rests on a degraded step
                    "degraded_anchor": cell_anchor(result_key(case_id, system, degraded[0].epoch))
                    if degraded
                    else None,
                    "anchor": cell_anchor(result_key(case_id, system)),
                }
            )
        out.append(
            {
                "id": case_id,
                "anchor": "case-" + anchor(case_id),
                "user": first.user_id,
                "setting": first.setting,
                "query": case.query.text if case else None,
                "need": case.gold.information_need if case else None,
                "cells": cells,
            }
        )
    return out


def write_report(
    path: str | Path,
    *,
    config: dict[str, Any],
    summary: dict[str, Any],
    records: Iterable[ResultRecord],
    cases: dict[str, Case] | None = None,
) -> None:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    records = sorted(records, key=lambda r: (r.case_id, r.system, r.epoch))
    systems = list(summary["systems"])
    env = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = _number
    env.filters["ci"] = ci_text
    env.filters["difference_ci"] = difference_ci_text
    env.filters["columns"] = _columns
    env.globals["format_cost"] = format_cost
    env.globals["judge_figures"] = lambda judge: judge_figures(summary, judge)
    env.globals["calls_of"] = lambda system, kind="system": _system_calls(summary, system, kind)
    env.globals["counts_by_kind"] = counts_by_kind
    env.globals["cell_anchor"] = cell_anchor
    env.globals["kinds"] = KINDS
    env.globals["ci_agrees"] = CI_AGREES
    env.globals["untestable"] = untestable_notes
    env.globals["unequal_n"] = unequal_n_note(summary)
    cost_chart, cost_axis, cost_key = _cost_chart(summary)
    specs = {s["name"]: s for s in config["recipe"]["systems"]}
    html = env.get_template("report.html.j2").render(
        config=config,
        summary=summary,
        specs=specs,
        systems=systems,
        records=records,
        failed=[r for r in records if not r.ok],
        cases=_cases_view(records, cases or {}, systems, list(summary.get("judges", []))),
        chart=_score_chart(summary),
        paper_tables=paper_tables(summary.get("paper") or []),
        epochs=epoch_rows(summary),
        variance=variance_rows(summary),
        cluster_methods=cluster_methods(summary),
        context_shares=context_share_rows(records, systems),
        wide_index=len(systems) * max(1, len(summary.get("judges", []))) > WIDE_INDEX,
        distributions=_distribution_chart(summary, records),
        cost_chart=cost_chart,
        cost_axis=cost_axis,
        cost_key=cost_key,
        failing_kinds=[d["kind"] for d in summary["episodes"].get("degraded", []) if not d["tolerated"]],
    )
    write_atomically(path, html)  # no key, even one an error quoted; a link in its place is replaced
