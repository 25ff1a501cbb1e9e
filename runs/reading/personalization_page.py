"""The personalization part of report.html (`templates/report/personalization.html.j2`): which
criteria respond to the user, the effects (own minus control) in one compact table, and one plot of
the headline effects with their intervals — all from summary.json's `personalization`
(`runs.reading.personalization`)."""

from __future__ import annotations

from typing import Any

from atelier.runs.reading.plots import Point, dot_plot


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


def personalization_part(summary: dict[str, Any]) -> dict[str, Any] | None:
    """What the part shows (None when the run had no controls)."""
    personalization = summary.get("personalization")
    if not personalization:
        return None
    chart = dot_plot(
        effect_points(personalization),
        xlabel="own − control (95% CI); 0: no personalization effect",
        gid="personalization-dots",
        reference=0.0,
    )
    return {
        "p": personalization,
        "responding": personalization["responding"],
        "methods": sorted({row["ci_method"] for row in personalization["effects"]}),
        "notes": sorted({note for row in personalization["effects"] for note in row.get("cluster_notes") or []}),
        "chart": chart,
    }
