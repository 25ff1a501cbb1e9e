"""Judges without running systems: `atelier rescore`, `atelier meta-eval`, `atelier bench judge`."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal, cast

import click
import typer
from typer.core import TyperGroup

from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli._common import (
    end_with_outcome,
    machine_facts,
    print_json,
    run_folder_option,
    run_outcome,
    worst_exit,
)
from atelier.runs.cli.gateway import token_refused_on_command_line

LABEL_TOKEN_ENV = "ATELIER_LABEL_TOKEN"


def parse_judge(text: str) -> dict[str, Any]:
    """`pqr` or a JSON object such as `{"name": "pqr", "axes": ["Q", "R"]}`."""
    text = text.strip()
    if not text.startswith("{"):
        return {"name": text}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--judge {text!r}: not a judge name or a JSON object ({exc.msg})") from None
    if not isinstance(value, dict) or "name" not in value:
        raise ConfigError(f'--judge {text!r}: a JSON judge needs a "name"')
    return value


def read_judges_file(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A TOML file with [[judges]] tables and optional [models.<role>] tables."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(data) - {"judges", "models"}
    if unknown:
        raise ConfigError(
            f"{path}: only [[judges]] and [models.<role>] tables belong here, not {', '.join(sorted(unknown))}"
        )
    return list(data.get("judges", [])), dict(data.get("models", {}))


def judge_models(
    models: dict[str, Any], model: str | None, api_base: str | None, api_key: str | None, roles: list[str]
) -> dict[str, Any]:
    """Judge-role model settings: the file's, then `--model/--api-base/--api-key` over `judge` and any
    judge role already set (the other judge roles fall back to `judge`)."""
    from atelier.agents.models.settings import ModelSettings

    update = {k: v for k, v in (("model", model), ("api_base", api_base), ("api_key", api_key)) if v}
    settings = {role: ModelSettings.model_validate(s) for role, s in models.items()}
    if update:
        for role in {"judge", *(r for r in roles if r in settings)}:
            base = settings[role].model_dump(exclude_unset=True) if role in settings else {}
            settings[role] = ModelSettings.model_validate({**base, **update})
    return settings


def rescore(
    run_dir: Path = typer.Argument(..., help="A finished run folder."),
    judge: list[str] = typer.Option(
        [], "--judge", help='A judge name, or a JSON object: \'{"name": "pqr", "axes": ["Q","R"]}\'. Repeatable.'
    ),
    judges_file: Path | None = typer.Option(
        None, "--judges", help="A TOML file of \\[\\[judges]] (and \\[models.<role>]) tables."
    ),
    model: str | None = typer.Option(
        None, "--model", help="The judge model (any litellm provider string, or `scripted`)."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for the judge model."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="ATELIER_API_KEY", help="API key for the judge model."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="The new run folder (default: beside the original; an existing one is resumed)."
    ),
    web: str = typer.Option(
        "replay",
        "--web",
        help="How judges read cited sources: replay (the original run's recorded web), record or live.",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    preflight: bool = typer.Option(
        True, "--preflight/--no-preflight", help="Check the judges' models (keys, a probe), data and judge fit first."
    ),
) -> None:
    """Judge a finished run's responses again (other judges or judge models); no system runs.

    Writes a new run folder beside RUN_DIR (config.json names the original) and prints its path last."""
    import asyncio

    from atelier.agents.models.settings import JUDGE_ROLES
    from atelier.runs.cli.run import _print_summary
    from atelier.runs.studies.rescore import Rescore

    if web not in ("replay", "record", "live"):
        raise ConfigError(f"--web must be replay, record or live, not {web!r}")
    judges = [parse_judge(j) for j in judge]
    models: dict[str, Any] = {}
    if judges_file is not None:
        more, models = read_judges_file(judges_file)
        judges += more
    settings = judge_models(models, model, api_base, api_key, list(JUDGE_ROLES))
    rescore = Rescore(
        run_dir,
        judges,
        models=settings,
        out=run_folder_option(out),
        web_mode=cast(Literal["replay", "live", "record"], web),  # checked above
        progress=progress,
        preflight=preflight,
    )
    folder = asyncio.run(rescore.run())
    _print_summary(folder.summary)
    outcome = rescore.runner.outcome
    assert outcome is not None  # a rescore ends by finishing its run folder
    code = end_with_outcome(outcome)
    typer.echo(str(folder.path))
    raise typer.Exit(code)


def meta_eval(
    run_dir: Path = typer.Argument(..., help="The run folder holding the judge under test."),
    judge: str = typer.Option(..., "--judge", help="The judge's key in that run (its name, or its label)."),
    labels: Path | None = typer.Option(
        None,
        "--labels",
        help="A filled-in sheet (CSV, from `meta-eval sheet`) or "
        "JSON Lines labels: case_id, system, criterion, score, feedback?",
    ),
    labeller: str | None = typer.Option(
        None, "--labeller", help="Or: this labeller's labels from the labelling page (`atelier label`)."
    ),
    against: Path | None = typer.Option(
        None, "--against", help="Or: another run folder whose judgments are the labels."
    ),
    against_judge: str | None = typer.Option(
        None, "--against-judge", help="The judge in --against (default: --judge)."
    ),
    criterion: list[str] = typer.Option(
        [],
        "--criterion",
        help="Only these criteria (a PQR dimension code also selects "
        "its sub-criteria; default: every one the labels name).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap CI of PCA."),
    feedback: bool = typer.Option(
        False, "--feedback", help="Also BESPOKE's feedback accuracy (a meta-judge model call per feedback pair)."
    ),
    model: str | None = typer.Option(None, "--model", help="The meta-judge model for --feedback (default: scripted)."),
    api_base: str | None = typer.Option(None, "--api-base"),
    api_key: str | None = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY"),
    out: Path | None = typer.Option(None, "--out", help="Also write the JSON here."),
) -> None:
    """Agreement of a judge's scores with labels (human, or another judge's run); prints JSON.

    Per criterion, each on its own scores: PCA (with a seeded bootstrap CI), MARD, Pearson, Spearman;
    their mean over criteria (BESPOKE Table 3's Avg.); PQR sub-criteria per (query, sub-criterion), by
    dimension and overall. Labels matching no response or criterion are counted and listed; when none
    matches, exit 2. With --feedback, BESPOKE's feedback accuracy. `atelier meta-eval RUN ...` is short
    for `atelier meta-eval compare RUN ...`."""
    import asyncio

    from atelier.runs.studies.meta_eval import (
        Bootstrap,
        agreement,
        feedback_agreement,
        labels_from_page,
        labels_from_run,
        read_labels,
        report_json,
        run_scores,
    )

    given = [option for option in (labels, against, labeller) if option is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one of --labels FILE, --labeller NAME or --against RUN_DIR")
    if labels is not None:
        truth = read_labels(labels)
    elif labeller is not None:
        truth = labels_from_page(run_dir, judge, labeller)
    else:
        assert against is not None
        truth = labels_from_run(against, against_judge or judge)
    scores = run_scores(run_dir, judge)
    report: dict[str, Any] = {
        "run": str(run_dir),
        "judge": judge,
        **agreement(scores, truth, criterion or None, Bootstrap(seed=seed)),
    }
    if feedback:
        from atelier.agents.models.gateway import Gateway
        from atelier.agents.models.settings import ModelSettings
        from atelier.runs.studies.rescore import load_run

        _, recipe, _ = load_run(run_dir)
        wanted = {case for case, _ in scores.records}
        cases = {c.id: c for c in recipe.cases(limited=False) if c.id in wanted}
        settings = ModelSettings.model_validate(
            {k: v for k, v in (("model", model or "scripted"), ("api_base", api_base), ("api_key", api_key)) if v}
        )
        from atelier.runs.execution.preflight import check_models

        asyncio.run(check_models({"--model (the meta-judge)": settings}))
        gateway = Gateway({"meta_judge": settings, "judge": settings, "system": settings})
        report["feedback_accuracy"] = asyncio.run(feedback_agreement(scores, truth.labels, cases, gateway, run_dir))
        report["dry_run"] = settings.is_scripted
    text = report_json(report)
    if out is not None:
        write_atomically(out, text)
    sys.stdout.write(text)
    # the agreement rests on the run's judgments: it ends as that run did (and, with --against, that one)
    codes = [end_with_outcome(run_outcome(run_dir), label=str(run_dir) if against is not None else None)]
    if against is not None:
        codes.append(end_with_outcome(run_outcome(against), label=str(against)))
    raise typer.Exit(worst_exit(codes))


def meta_eval_sheet(
    run_dir: Path = typer.Argument(..., help="The run folder whose responses are to be labelled."),
    out: Path = typer.Option(..., "--out", help="The sheet to write (CSV)."),
    judge: str | None = typer.Option(None, "--judge", help="Whose criteria (default: the run's only judge)."),
    criterion: list[str] = typer.Option(
        [], "--criterion", help="Only these criteria (a PQR dimension code selects its sub-criteria)."
    ),
) -> None:
    """Write a labelling sheet (CSV) for people to fill in; prints a JSON summary.

    One row per case x system x criterion the judge scored (PQR: per sub-criterion), with the query,
    persona, response, the criterion's description and scale, and empty `label` and `feedback`
    columns; the judge's own scores are left out. Give it back filled in with
    `atelier meta-eval RUN --judge J --labels SHEET.csv`."""
    from atelier.runs.studies.meta_eval import report_json, write_sheet

    summary = write_sheet(run_dir, out, judge, criterion or None)
    sys.stdout.write(report_json(summary.model_dump()))
    raise typer.Exit(end_with_outcome(run_outcome(run_dir)))


class _MetaEvalGroup(TyperGroup):
    """`meta-eval RUN ...` runs `meta-eval compare RUN ...`; `meta-eval sheet RUN ...` writes a sheet."""

    # typer's stubs name its vendored click's Context (typer._click, private), not click's
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["compare", *args]
        return super().parse_args(ctx, args)  # type: ignore[arg-type]


def meta_eval_app() -> typer.Typer:
    group = typer.Typer(
        cls=_MetaEvalGroup,
        no_args_is_help=True,
        help="Agreement of a judge with labels, and "
        "labelling sheets. `atelier meta-eval RUN --judge J --labels FILE` compares.",
    )
    group.command("compare")(meta_eval)
    group.command("sheet")(meta_eval_sheet)
    return group


def label(
    run_dir: Path = typer.Argument(..., help="The run folder whose responses are to be labelled."),
    judge: str | None = typer.Option(None, "--judge", help="Whose rubric (default: the run's only judge)."),
    labeller: str | None = typer.Option(
        None, "--labeller", help="Open the page as this labeller (else the page asks for a name)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="A loopback address to serve on."),
    port: int = typer.Option(8766, "--port", min=0, max=65535, help="The port (0: any free one)."),
    token: str | None = typer.Option(
        None, "--token", hidden=True, callback=token_refused_on_command_line(LABEL_TOKEN_ENV), help="Refused."
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help=f"A file whose first line is the page's token (else ${LABEL_TOKEN_ENV}; else a new one, in the URL).",
    ),
) -> None:
    """Serve a page on loopback on which people label the run's responses on the judge's rubric
    (BESPOKE 1-5 per criterion, PQR sub-criteria 0-10, LaMP-QA aspects 0-2): blind, in random order,
    keyboard-driven, each label saved as it is given to RUN_DIR/labels/JUDGE/LABELLER.jsonl. Then
    `atelier meta-eval RUN_DIR --judge JUDGE --labeller NAME`."""
    from atelier.agents.models.openai_api import is_loopback_host
    from atelier.runs.cli.gateway import checked_token, given_token
    from atelier.runs.studies.labelling import serve_labelling

    if not is_loopback_host(host):
        raise ConfigError(f"--host {host}: the labelling page serves on loopback only")
    token, _ = checked_token(given_token(token_file, LABEL_TOKEN_ENV))
    server, session, url = serve_labelling(run_dir, judge, host=host, port=port, token=token, labeller=labeller)
    typer.echo(
        f"labelling {len(session.responses)} responses of judge {session.judge} ({session.rubric.name}) "
        f"from {run_dir}\nopen {url}\n(Ctrl-C stops; labels are saved as they are given)"
    )
    server.serve_forever()


def bench_judge(
    pairs: int = typer.Option(20, "--pairs", min=1, help="(task, persona) pairs."),
    systems: int = typer.Option(5, "--systems", min=1, help="Systems judged on every pair."),
    benchmark: str = typer.Option("sample", "--benchmark", help="Where the pairs come from (sample, pdr, ...)."),
    setting: str | None = typer.Option(None, "--setting"),
    model: str = typer.Option("scripted", "--model", help="The judge model."),
    api_base: str | None = typer.Option(None, "--api-base"),
    concurrency: int = typer.Option(16, "--concurrency", min=1),
) -> None:
    """PQR prompt tokens per judged report with criteria reuse and without; prints JSON."""
    import asyncio

    from atelier.agents.models.settings import ModelSettings
    from atelier.runs.bench.judge import bench_judge as run_bench

    settings = ModelSettings.model_validate({k: v for k, v in (("model", model), ("api_base", api_base)) if v})
    result = asyncio.run(
        run_bench(
            pairs=pairs, systems=systems, benchmark=benchmark, setting=setting, model=settings, concurrency=concurrency
        )
    )
    print_json({"machine": machine_facts(), **result})


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("rescore")(rescore)
    app.add_typer(meta_eval_app(), name="meta-eval")
    app.command("label")(label)
    bench_app.command("judge")(bench_judge)
