"""`atelier plan RUN_DIR --detect D`: from a pilot run, the cases x epochs x judge repeats each
comparison needs for the run's own test to declare a difference of D with 80% power (simulated), and
what that costs (`runs.studies.plan`)."""

from __future__ import annotations

from pathlib import Path

import typer


def plan(
    run_dir: Path = typer.Argument(..., help="The pilot run's folder."),
    detect: float = typer.Option(..., "--detect", help="The difference to detect, in the judge's own scale."),
    power: float = typer.Option(0.8, "--power", min=0.5, max=0.999, help="Probability of detecting it."),
    alpha: float = typer.Option(0.05, "--alpha", min=0.001, max=0.5, help="Two-sided significance level."),
    model: str | None = typer.Option(None, "--model", help="Price the plan with this model on every role."),
    no_cost: bool = typer.Option(False, "--no-cost", help="Skip the cost forecast (its scripted dry runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Per comparison of a pilot run: the cases x epochs x judge repeats with which the run's own test
    declares a difference of --detect with --power (5% two-sided), simulated from the pilot's variance
    by source (clusters, cases, epochs, judge repeats), and what each plan costs (the recipe's cost
    forecast). Before it prices a model that is neither scripted nor local, it runs the run's
    preflight of it (its key, its probe): a missing or rejected key is exit 2."""
    from rich.table import Table

    from atelier.runs.cli._common import print_json, table_console
    from atelier.runs.reading.terminal_text import cells
    from atelier.runs.studies.plan import plan_run

    if not no_cost:  # the models it prices (not scripted or local): the run's preflight of them, probes too
        import asyncio

        from atelier.runs.execution.preflight import check_priced_models
        from atelier.runs.folder.layout import load_run_config
        from atelier.runs.folder.recipe import Recipe

        recipe = Recipe.model_validate(load_run_config(run_dir)["recipe"]).with_overrides(model=model)
        asyncio.run(check_priced_models(recipe, skip="(`--no-cost` prices nothing, and checks no model)"))
    result = plan_run(run_dir, detect, power=power, alpha=alpha, model=model, with_cost=not no_cost)
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    console = table_console()
    console.print(
        f"plan for detecting {detect:g} at {power:.0%} power, {alpha:g} two-sided "
        f"(benchmark: {result.benchmark_cases} cases)"
    )
    for c in result.comparisons:
        pilot = c.pilot
        table = Table(
            title=cells(
                f"{c.judge}: {c.a} - {c.b} (pilot: {pilot['cases']} cases, {pilot['epochs']:g} epoch(s), "
                f"{pilot['repeats']:g} repeat(s); difference {pilot['mean_difference']:+.3g}, MDE "
                f"{'none' if pilot['mde'] is None else format(pilot['mde'], '.3g')})"
            )[0],
        )
        for column in (
            "epochs",
            "repeats",
            "cases",
            "clusters",
            "power",
            "MDE",
            "episodes",
            "judgments",
            "calls",
            "USD",
        ):
            table.add_column(column)
        for o in c.options:
            cost = o.cost
            table.add_row(
                *cells(
                    str(o.epochs),
                    str(o.repeats),
                    str(o.cases) if o.cases is not None else "not enough",
                    " x ".join(str(g) for g in o.clusters.values()) or "–",
                    f"{o.power:.0%} ± {o.power_error:.1%}" if o.power_error else f"{o.power:.0%}",
                    f"{o.mde:.3g}" if o.mde is not None else "none",
                    str(o.episodes or "–"),
                    str(o.judgments or "–"),
                    f"{cost.calls[0]:,.0f} – {cost.calls[1]:,.0f}" if cost else "–",
                    (f"${cost.usd[0]:,.4f} – ${cost.usd[1]:,.4f}" if cost.usd is not None else "unknown")
                    if cost
                    else "–",
                )
            )
        console.print(table)
        parts = " + ".join(f"{k} {v:.3g}" for k, v in c.variance.clusters.items())
        console.print(
            f"variance of the difference: {parts + ' + ' if parts else ''}case {c.variance.case:.3g} + "
            f"epoch {c.variance.epoch:.3g} + judge repeat {c.variance.repeat:.3g}"
        )
        if c.recommended is not None:
            r = c.recommended
            console.print(
                f"recommended: {r.cases} cases x {r.epochs} epoch(s) x {r.repeats} judge repeat(s): the run's test "
                f"declares {result.detect:g} with {r.power:.0%} power ({r.power_method})"
            )
        for note in c.notes:
            console.print(f"note: {note}")
    for note in result.notes:
        console.print(f"note: {note}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("plan")(plan)
