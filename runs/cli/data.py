"""`atelier data list|check|fetch` (the data registry) and `atelier bench data` (loader speed)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import typer

from atelier.runs.cli._common import machine_facts, print_json

# Splits a plain `data check` cannot load: their data is not in the data directory.
_NEEDS_OPTIONS = {"lampqa": "option data_file", "bespoke": "option data_dir"}
_SKIPPED_SPLITS = {("ikat", "2025_test"): "option topics_file"}


@dataclass
class CheckReport:
    lines: list[str] = field(default_factory=list)
    failures: int = 0
    counts: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    def ok(self, text: str) -> None:
        self.lines.append(f"ok    {text}")

    def fail(self, text: str) -> None:
        self.failures += 1
        self.lines.append(f"FAIL  {text}")

    def note(self, text: str) -> None:
        self.lines.append(f"skip  {text}")


def _benchmarks_by_dataset() -> dict[str, list[str]]:
    from atelier.benchmarks.data_files import registered_file
    from atelier.benchmarks.registry import benchmark_names, get_benchmark

    out: dict[str, list[str]] = defaultdict(list)
    for name in benchmark_names():
        for relpath in get_benchmark(name).data_files:
            entry = registered_file(relpath)
            if entry is not None and name not in out[entry.dataset]:
                out[entry.dataset].append(name)
    return out


def data_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Data sets, their files, where each resolves from, and the benchmarks that read them."""
    from atelier.benchmarks.data_files import data_dir, locate, registered_files

    readers = _benchmarks_by_dataset()
    datasets: dict[str, list[dict]] = defaultdict(list)
    for entry in registered_files():
        found = locate(entry.relpath)
        if found is not None:
            where = f"{found[1]}: {found[0]}"
        elif entry.url:
            where = f"not local; downloadable from {entry.url}"
        else:
            where = "missing (no upstream URL)"
        datasets[entry.dataset].append({"file": entry.relpath, "resolves": where, "url": entry.url})
    if as_json:
        print_json(
            {
                "data_dir": str(data_dir()),
                "datasets": {
                    name: {"benchmarks": readers.get(name, []), "files": files}
                    for name, files in sorted(datasets.items())
                },
            }
        )
        return
    typer.echo(f"data dir: {data_dir()}")
    for name, files in sorted(datasets.items()):
        benchmarks = ", ".join(readers.get(name, [])) or "(no benchmark)"
        typer.echo(f"\n{name}  [{len(files)} files; benchmarks: {benchmarks}]")
        for f in files:
            typer.echo(f"  {f['file']}  <- {f['resolves']}")


def _check_files(dataset: str | None, report: CheckReport) -> None:
    from atelier.benchmarks.common.errors import DataError
    from atelier.benchmarks.data_files import locate, registered_files, verify_file

    for entry in registered_files(dataset):
        found = locate(entry.relpath)
        if found is None:
            report.fail(
                f"{entry.relpath}: not found locally ({'run a loader to download it' if entry.url else 'no upstream URL'})"
            )
            continue
        path = found[0]
        try:
            how = verify_file(entry, path)
            counts = entry.count_records(path) if entry.count_records else {}
        except DataError as exc:
            report.fail(f"{entry.relpath}: {exc}")
            continue
        group = f"{entry.dataset} {entry.subset}".strip()
        for kind, n in counts.items():
            report.counts[group][kind] += n
        described = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        report.ok(f"{entry.relpath}: {how}" + (f"; {described}" if described else ""))


def parse_options(pairs: list[str], benchmark: str | None) -> dict[str, str]:
    """`--option KEY=VALUE` (repeatable) -> the loader options of one benchmark, validated by its
    options model (an unknown key or a bad value is one line naming it)."""
    from pydantic import ValidationError

    from atelier.benchmarks.common.errors import ConfigError
    from atelier.benchmarks.registry import get_benchmark

    if not pairs:
        return {}
    if benchmark is None:
        raise ConfigError("--option needs a benchmark to check: atelier data check NAME --option KEY=VALUE")
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {pair!r}: expected KEY=VALUE (e.g. data_dir=~/data/bespoke)")
        options[key.strip()] = str(Path(value).expanduser()) if value.startswith("~") else value
    try:
        get_benchmark(benchmark).options.model_validate(options)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        message = "unknown option" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"--option {key}: {message} (benchmark {benchmark})") from None
    return options


def _check_benchmarks(names: list[str], report: CheckReport, options: dict[str, str] | None = None) -> None:
    from atelier.benchmarks.common.errors import AtelierError
    from atelier.benchmarks.data_fetch import where_to_get
    from atelier.benchmarks.registry import get_benchmark, load_cases

    for name in names:
        spec = get_benchmark(name)
        if name in _NEEDS_OPTIONS and not options:
            report.note(
                f"benchmark {name}: its data is not in the data directory (needs {_NEEDS_OPTIONS[name]}: "
                f"--option KEY=PATH); {where_to_get(name)}"
            )
            continue
        for split in spec.splits:
            if (name, split) in _SKIPPED_SPLITS and not options:
                report.note(f"benchmark {name} split {split}: needs {_SKIPPED_SPLITS[(name, split)]}")
                continue
            try:
                cases = load_cases(name, split=split, options=options or None)
            except AtelierError as exc:
                report.fail(f"benchmark {name} split {split}: {exc}")
                continue
            report.ok(f"benchmark {name} split {split} (setting {spec.setting_default}): {len(cases)} cases")


def data_check(
    name: str | None = typer.Argument(None, help="A data set (pdr, ikat, ...) or benchmark name; default: all."),
    option: list[str] = typer.Option(
        [],
        "--option",
        help="A loader option of benchmark NAME, KEY=VALUE (repeatable): check your own download, "
        "e.g. `atelier data check bespoke --option data_dir=PATH`.",
    ),
) -> None:
    """Check every registered file's sha256, parse every record, load every benchmark split; exit 2 on any failure
    (the data is at fault, not Atelier)."""
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.benchmarks.data_files import registered_files
    from atelier.benchmarks.registry import benchmark_names, get_benchmark

    if option and name not in benchmark_names():
        raise ConfigError(
            f"--option needs a benchmark NAME ({', '.join(benchmark_names())}), not {name!r}"
            if name
            else "--option needs a benchmark NAME: atelier data check NAME --option KEY=VALUE"
        )
    options = parse_options(option, name)

    datasets = sorted({f.dataset for f in registered_files()})
    readers = _benchmarks_by_dataset()
    if name is None:
        selected_sets, selected_benchmarks = datasets, benchmark_names()
    elif name in datasets:
        selected_sets, selected_benchmarks = [name], readers.get(name, [])
    elif name in benchmark_names():
        spec = get_benchmark(name)
        selected_sets = sorted({f.dataset for f in registered_files() if f.relpath in spec.data_files})
        selected_benchmarks = [name]
    else:
        raise ConfigError(
            f"unknown data set or benchmark {name!r}; data sets: {', '.join(datasets)}; benchmarks: {', '.join(benchmark_names())}"
        )
    report = CheckReport()
    for dataset in selected_sets:
        _check_files(dataset, report)
    _check_benchmarks(selected_benchmarks, report, options)
    for line in report.lines:
        typer.echo(line)
    typer.echo("")
    for group, counts in sorted(report.counts.items()):
        typer.echo(f"{group}: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    typer.echo(f"\n{len(report.lines) - report.failures} ok/skipped, {report.failures} failed")
    if report.failures:
        raise typer.Exit(2)


def data_fetch(
    name: str = typer.Argument(..., help="A data set: pdr, ikat, locomo, prefeval, drb, wiki, bespoke, lampqa."),
) -> None:
    """Get a data set's public release from its upstream, each file checked against its registered
    sha256 (files already here and matching are kept); offline, or with no checksum registered, one
    line says where to get it (exit 2)."""
    from atelier.benchmarks.data_fetch import fetch

    for item in fetch(name):
        typer.echo(f"{item.how:8}  {item.file}  -> {item.path}")


def bench_data(repeat: int = typer.Option(3, min=1, help="Timed repetitions (each parses the files afresh).")) -> None:
    """Time loading all 250 PDR queries and all iKAT topics in the data directory (target: under 2 s)."""
    from atelier.benchmarks.registry import load_cases

    ikat_splits = ("2023_train", "2023_test", "2024_test")
    pdr_times, ikat_times = [], []
    pdr_cases = ikat_cases = 0
    for _ in range(repeat):
        start = time.perf_counter()
        pdr_cases = len(load_cases("pdr", split="all", setting="persona"))
        pdr_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        ikat_cases = sum(len(load_cases("ikat", split=split)) for split in ikat_splits)
        ikat_times.append(time.perf_counter() - start)
    totals = [p + i for p, i in zip(pdr_times, ikat_times)]
    print_json(
        {
            "benchmark": "data loading",
            "repeat": repeat,
            "pdr_all_queries": {
                "cases": pdr_cases,
                "seconds_median": statistics.median(pdr_times),
                "seconds_max": max(pdr_times),
            },
            "ikat_all_topics": {
                "splits": list(ikat_splits),
                "cases": ikat_cases,
                "seconds_median": statistics.median(ikat_times),
                "seconds_max": max(ikat_times),
            },
            "total_seconds_median": statistics.median(totals),
            "target_seconds": 2.0,
            "within_target": max(totals) < 2.0,
            "machine": machine_facts(),
        }
    )


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    data_app = typer.Typer(help="The data registry: list, check and fetch data sets.", no_args_is_help=True)
    data_app.command("list")(data_list)
    data_app.command("check")(data_check)
    data_app.command("fetch")(data_fetch)
    app.add_typer(data_app, name="data")
    bench_app.command("data")(bench_data)
