"""report.html: a self-contained page (no network needed to open it) with the run's tables and plots."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from runs.results import ResultRecord

TEMPLATE_DIR = Path(__file__).parent / "templates"


def _score_chart(summary: dict[str, Any]) -> str | None:
    """Mean score with its 95% CI per system and judge, as inline SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(summary["systems"])
    judges = sorted({j for s in summary["systems"].values() for j in s["judges"]})
    if not systems or not judges:
        return None
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
        ax.bar(range(len(systems)), means, yerr=[lows, highs], capsize=4, color="#4c72b0")
        ax.set_xticks(range(len(systems)), systems, rotation=20, ha="right")
        ax.set_title(judge)
        ax.set_ylabel("mean score (95% CI)")
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def write_report(
    path: str | Path,
    *,
    config: dict[str, Any],
    summary: dict[str, Any],
    records: list[ResultRecord],
) -> None:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATE_DIR), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("report.html.j2").render(
        config=config,
        summary=summary,
        records=sorted(records, key=lambda r: (r.case_id, r.system)),
        chart=_score_chart(summary),
    )
    Path(path).write_text(html, encoding="utf-8")
