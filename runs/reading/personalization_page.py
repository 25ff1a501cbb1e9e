"""The personalization section of report.html: which criteria respond to the user, the effects
(own minus control) in one compact table, and one plot of the headline effects with their
intervals — all from summary.json's `personalization` (`runs.reading.personalization`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atelier.runs.reading.report import Point, _number, dot_plot

TEMPLATE = "personalization.html.j2"


def effect_points(personalization: dict[str, Any]) -> dict[str, list[Point]]:
    """Per judge, each (system, control)'s headline effect with its 95% interval."""
    panels: dict[str, list[Point]] = {}
    for row in personalization["effects"]:
        if row["criterion"] is None:
            panels.setdefault(row["judge"], []).append(
                Point(
                    label=f"{row['system']} − {row['control']}",
                    mean=row["mean_difference"],
                    low=row["ci_low"],
                    high=row["ci_high"],
                    n=row["n"],
                )
            )
    return panels


def personalization_section(summary: dict[str, Any]) -> str:
    """The section's HTML ("" when the run had no controls)."""
    personalization = summary.get("personalization")
    if not personalization:
        return ""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape(["html", "j2"])
    )
    env.filters["num"] = _number
    chart = dot_plot(
        effect_points(personalization),
        xlabel="own − control (95% CI); 0: no personalization effect",
        gid="personalization-dots",
        reference=0.0,
    )
    return env.get_template(TEMPLATE).render(
        p=personalization,
        responding=personalization["responding"],
        methods=sorted({row["ci_method"] for row in personalization["effects"]}),
        notes=sorted({note for row in personalization["effects"] for note in row.get("cluster_notes") or []}),
        chart=chart,
    )
