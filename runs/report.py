"""report.html: a self-contained page (no network needed to open it) a researcher would rather read
than the JSON: per system n / mean / CI / cost / tokens / latency / failures; score distributions;
paired comparisons against the baseline, corrected for multiple comparisons; cost against score;
the paper's numbers beside ours; and per case the query, the recalled memory and the systems side
by side with their responses, sources and rendered judge details. Every number on it comes from
summary.json (tables) or results.jsonl (cases); `atelier report RUN_DIR` renders it again.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.case import Case
from benchmarks.common.degradation import KINDS, counts_by_kind
from benchmarks.common.redaction import active_redactor
from runs.results import ResultRecord, result_key
from runs.usage import format_cost

TEMPLATE_DIR = Path(__file__).parent / "templates"
_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


# ----------------------------------------------------------------------------- charts (inline SVG)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    buffer = io.StringIO()
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


def _score_chart(summary: dict[str, Any]) -> str | None:
    """Mean score with its 95% CI per system and judge."""
    systems, judges = _judged(summary)
    if not systems or not judges:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(judges), figsize=(max(4.5, 1.3 * len(systems)) * len(judges), 3.6), squeeze=False)
    for ax, judge in zip(axes[0], judges):
        means, lows, highs = [], [], []
        for system in systems:
            stats = summary["systems"][system]["judges"].get(judge, {})
            mean = stats.get("mean")
            low, high = stats.get("ci95", [None, None])
            means.append(mean or 0.0)
            lows.append((mean - low) if mean is not None and low is not None else 0.0)
            highs.append((high - mean) if mean is not None and high is not None else 0.0)
        ax.bar(range(len(systems)), means, yerr=[lows, highs], capsize=4, color=_PALETTE[0])
        ax.set_xticks(range(len(systems)), systems, rotation=20, ha="right")
        ax.set_title(judge)
        ax.set_ylabel("mean score (95% CI)")
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return _svg(fig)


def _distribution_chart(summary: dict[str, Any], records: list[ResultRecord]) -> str | None:
    """Each system's per-case scores per judge: a box plot with every case as a point."""
    import numpy as np

    systems, judges = _judged(summary)
    if not systems or not judges:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(judges), figsize=(max(4.5, 1.3 * len(systems)) * len(judges), 3.6), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, judge in zip(axes[0], judges):
        data = [
            [r.scores[judge] for r in records if r.system == s and r.ok and r.scores.get(judge) is not None]
            for s in systems
        ]
        positions = [i for i, values in enumerate(data) if values]
        ax.boxplot([data[i] for i in positions], positions=positions, widths=0.5, showfliers=False)
        for i in positions:
            jitter = rng.uniform(-0.12, 0.12, len(data[i]))
            ax.scatter(np.full(len(data[i]), i) + jitter, data[i], s=12, alpha=0.6, color=_PALETTE[i % len(_PALETTE)])
        ax.set_xticks(range(len(systems)), systems, rotation=20, ha="right")
        ax.set_xlim(-0.6, len(systems) - 0.4)
        ax.set_title(f"{judge}: per-case scores")
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return _svg(fig)


def _cost_chart(summary: dict[str, Any]) -> tuple[str | None, str]:
    """Mean score against what the system's own model calls cost per episode (USD when every call
    was priced, else tokens)."""
    systems, judges = _judged(summary)
    points = {s: _system_calls(summary, s) for s in systems}
    if not systems or not judges or not any(p["provider_calls"] or p["calls"] for p in points.values()):
        return None, ""
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
            ax.scatter([x], [mean], s=40, color=_PALETTE[i % len(_PALETTE)])
            ax.annotate(system, (x, mean), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel(axis)
        ax.set_ylabel(f"mean {judge}")
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return _svg(fig), axis


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


_STANDARD = {"n", "mean", "ci95", "failed", "flags", "mean_repeat_std", "criteria"}


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


def _cases_view(records: list[ResultRecord], cases: dict[str, Case], systems: list[str]) -> list[dict[str, Any]]:
    by_case: dict[str, dict[str, ResultRecord]] = defaultdict(dict)
    for record in records:
        by_case[record.case_id][record.system] = record
    out = []
    for case_id in sorted(by_case):
        case = cases.get(case_id)
        first = next(iter(by_case[case_id].values()))
        cells = []
        for system in systems:
            record = by_case[case_id].get(system)
            text, citations = response_parts(record) if record else ("", [])
            cells.append(
                {
                    "system": system,
                    "record": record,
                    "text": text,
                    "citations": citations,
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

    records = sorted(records, key=lambda r: (r.case_id, r.system))
    systems = list(summary["systems"])
    env = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = _number
    env.filters["columns"] = _columns
    env.globals["format_cost"] = format_cost
    env.globals["judge_figures"] = lambda judge: judge_figures(summary, judge)
    env.globals["calls_of"] = lambda system, kind="system": _system_calls(summary, system, kind)
    env.globals["counts_by_kind"] = counts_by_kind
    env.globals["cell_anchor"] = cell_anchor
    env.globals["kinds"] = KINDS
    cost_chart, cost_axis = _cost_chart(summary)
    specs = {s["name"]: s for s in config["recipe"]["systems"]}
    html = env.get_template("report.html.j2").render(
        config=config,
        summary=summary,
        specs=specs,
        systems=systems,
        records=records,
        failed=[r for r in records if not r.ok],
        cases=_cases_view(records, cases or {}, systems),
        chart=_score_chart(summary),
        distributions=_distribution_chart(summary, records),
        cost_chart=cost_chart,
        cost_axis=cost_axis,
        failing_kinds=[d["kind"] for d in summary["episodes"].get("degraded", []) if not d["tolerated"]],
    )
    Path(path).write_text(active_redactor().redact(html), encoding="utf-8")  # no key, even one an error quoted
