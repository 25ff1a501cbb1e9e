"""The reading pages' plots (matplotlib, written as inline SVG with their text kept as text, so a
browser test can measure every label's box).

Every axis is honest about where it starts, and says so on the plot: a score axis spans the 95%
CIs it shows (never a zoom onto bare means, which makes a 0.004 difference look large) and its
label says it does not start at 0; a cost or token axis starts at 0. Labels never collide: a
system is a row with its name on the y axis (as many rows as systems, each as tall as a line of
text), never a name written next to a point, and an axis carries at most a few short ticks.
"""

from __future__ import annotations

import io
from typing import Any

from pydantic import BaseModel

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
SPANS_CIS = "axis spans the 95% CIs, not from 0"
FROM_ZERO = "axis from 0"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def svg_of(fig) -> str:
    """The figure as inline SVG, its text kept as text (searchable, and measurable by a test)."""
    buffer = io.StringIO()
    with _pyplot().rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg")
    _pyplot().close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


class Point(BaseModel):
    """One row of a dot plot: a system's (or a run's system's) mean with its 95% CI over n cases."""

    label: str
    mean: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0


def _few_ticks(axis, nbins: int = 4) -> None:
    """At most `nbins` + 1 ticks, written short (`0.25`, `1.2e+04`): ticks never run into each other."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=nbins, min_n_ticks=2))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))


def grid(panels: int, rows: int, *, label_chars: int = 20, columns: int | None = None):
    """Small multiples: at most three panels a line (two when each has many rows), each as tall as
    its rows need, so 40 labels never overlap, and as wide as its longest label needs."""
    plt = _pyplot()
    columns = columns or max(1, min(panels, 3 if rows <= 12 else 2))
    panel_width = max(4.5, 3.2 + 0.07 * label_chars)
    lines = -(-panels // columns)
    fig, axes = plt.subplots(
        lines,
        columns,
        figsize=(panel_width * columns, (1.05 + 0.24 * rows) * lines),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:panels])


def _whisker(ax, y: float, point: Point, color: str) -> None:
    mean = point.mean or 0.0
    if point.n >= 2 and point.low is not None and point.high is not None:
        ax.errorbar([mean], [y], xerr=[[mean - point.low], [point.high - mean]], fmt="o", color=color, capsize=3)
    else:
        ax.scatter([mean], [y], s=30, facecolors="white", edgecolors=color, zorder=3)


def dot_plot(panels: dict[str, list[Point]], *, xlabel: str, gid: str, reference: float | None = None) -> str | None:
    """A sorted dot plot per panel (a judge, a metric): one row per system, best mean on top, the
    mean as a dot and its 95% CI as a whisker; a hollow dot is one case (no CI). Systems with no
    score are left out and counted in the panel's title. Each y label is an SVG group
    `<gid>-<panel>-label-<i>`, so the page (and a test) can find every system's row. The x axis
    spans the CIs, and its label says so."""
    measured = {title: [p for p in points if p.mean is not None] for title, points in panels.items()}
    shown = [title for title, points in measured.items() if points]
    if not shown:
        return None
    longest = max(len(p.label) for t in shown for p in measured[t])
    fig, axes = grid(len(shown), max(len(measured[t]) for t in shown), label_chars=longest)
    for index, (ax, title) in enumerate(zip(axes, shown)):
        points = sorted(measured[title], key=lambda p: (-(p.mean or 0.0), p.label))
        ys = list(range(len(points)))
        for y, point in zip(ys, points):
            _whisker(ax, y, point, PALETTE[0])
        ax.set_yticks(ys, [p.label for p in points], fontsize=8)
        for i, label in enumerate(ax.get_yticklabels()):
            label.set_gid(f"{gid}-{index}-label-{i}")
        ax.set_ylim(len(points) - 0.5, -0.5)  # the best on top
        if reference is not None:
            ax.axvline(reference, color="#999", linewidth=0.8, linestyle="--")
        left_out = len(panels[title]) - len(points)
        ax.set_title(title + (f" ({left_out} not measured)" if left_out else ""), fontsize=10)
        ax.set_xlabel(f"{xlabel}\n({SPANS_CIS})", fontsize=8)
        _few_ticks(ax.xaxis)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", color="#eee")
        ax.spines[["top", "right"]].set_visible(False)
    return svg_of(fig)


def distribution_plot(panels: dict[str, dict[str, list[float]]]) -> str | None:
    """Per panel (a judge), each system's per-case scores: a horizontal box plot with every case as
    a point, systems sorted by median (highest on top)."""
    import numpy as np

    shown = {title: {s: v for s, v in data.items() if v} for title, data in panels.items()}
    shown = {title: data for title, data in shown.items() if data}
    if not shown:
        return None
    longest = max(len(s) for data in shown.values() for s in data)
    fig, axes = grid(len(shown), max(len(d) for d in shown.values()), label_chars=longest)
    rng = np.random.default_rng(0)
    for ax, (title, data) in zip(axes, shown.items()):
        ordered = sorted(data, key=lambda s: (-float(np.median(data[s])), s))
        ys = list(range(len(ordered)))
        ax.boxplot([data[s] for s in ordered], positions=ys, widths=0.5, showfliers=False, orientation="horizontal")
        for y, system in zip(ys, ordered):
            values = data[system]
            jitter = rng.uniform(-0.15, 0.15, len(values))
            ax.scatter(values, np.full(len(values), y) + jitter, s=10, alpha=0.6, color=PALETTE[y % len(PALETTE)])
        ax.set_yticks(ys, ordered, fontsize=8)
        ax.set_ylim(len(ordered) - 0.5, -0.5)
        ax.set_title(f"{title}: per-case scores", fontsize=10)
        ax.set_xlabel("score (axis spans the scores, not from 0)", fontsize=8)
        _few_ticks(ax.xaxis)
        ax.tick_params(axis="x", labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    return svg_of(fig)


class CostRow(BaseModel):
    """A system's row of the cost plot: its score (mean, CI) per judge, and its cost per episode as
    spent and as it would be with nothing answered from the response cache."""

    label: str
    scores: dict[str, Point]
    spent: float
    uncached: float


def cost_plot(rows: list[CostRow], judges: list[str], *, unit: str, gid: str = "cost") -> str | None:
    """Score and cost side by side, a row per system sorted by the first judge's mean (best on top):
    one panel per judge with the mean and its 95% CI (the axis spans the CIs), then one panel with
    the cost per episode as bars from 0 — filled as spent, outlined as it would cost uncached. Rows
    share their y axis, so a system's score and cost read on one line and no name sits by a point."""
    rows = [r for r in rows if any(p.mean is not None for p in r.scores.values())]
    if not rows or not judges:
        return None
    first = judges[0]
    rows = sorted(rows, key=lambda r: (-(r.scores[first].mean or float("-inf")) if first in r.scores else 0, r.label))
    plt = _pyplot()
    longest = max(len(r.label) for r in rows)
    panels = len(judges) + 1
    width = max(4.5, 3.2 + 0.07 * longest) + 3.0 * (panels - 1)
    fig, axes = plt.subplots(
        1,
        panels,
        figsize=(min(width, 14), 1.2 + 0.24 * len(rows)),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    ys = list(range(len(rows)))
    for index, judge in enumerate(judges):
        ax = axes[0][index]
        for y, row in zip(ys, rows):
            point = row.scores.get(judge)
            if point is not None and point.mean is not None:
                _whisker(ax, y, point, PALETTE[0])
        ax.set_title(f"mean {judge}", fontsize=9)
        ax.set_xlabel(f"95% CI ({SPANS_CIS})", fontsize=8)
        _few_ticks(ax.xaxis, 3)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", color="#eee")
        ax.spines[["top", "right"]].set_visible(False)
    ax = axes[0][-1]
    ax.barh(ys, [r.uncached for r in rows], height=0.6, facecolor="none", edgecolor=PALETTE[1], label="uncached")
    ax.barh(ys, [r.spent for r in rows], height=0.6, color=PALETTE[1], label="as spent")
    ax.set_xlim(left=0, right=max([r.uncached for r in rows] + [r.spent for r in rows] + [1e-12]) * 1.1)
    ax.set_title(f"{unit} per episode", fontsize=9)
    ax.set_xlabel(f"filled: as spent; outline: uncached ({FROM_ZERO})", fontsize=8)
    _few_ticks(ax.xaxis, 3)
    ax.tick_params(axis="x", labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_yticks(ys, [r.label for r in rows], fontsize=8)
    for i, label in enumerate(axes[0][0].get_yticklabels()):
        label.set_gid(f"{gid}-0-label-{i}")
    axes[0][0].set_ylim(len(rows) - 0.5, -0.5)
    return svg_of(fig)


def panels_of(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The summary's systems, and its judges that scored something."""
    systems = list(summary["systems"])
    judges = [
        j
        for j in summary.get("judges", [])
        if any(s["judges"].get(j, {}).get("n") for s in summary["systems"].values())
    ]
    return systems, judges
