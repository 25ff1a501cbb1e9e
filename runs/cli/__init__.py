"""The `atelier` command. Each area registers its commands from its own module in this package.

Command modules import heavy libraries (litellm, torch, chromadb) inside the command functions,
so `atelier --help` stays fast.

Errors end a command with one line on stderr, never a bare traceback:
- exit 2: the input is at fault — a recipe, data file, run folder or flag (`AtelierError`, whose
  message names the file, line or key), a file the command cannot read or write (`OSError`), or
  a command line click refuses (an unknown flag, a value of the wrong type);
- exit 1: anything else, i.e. a bug: the line names the exception and the file holding its full
  traceback (`$ATELIER_CACHE_DIR/errors/`, default `~/.cache/atelier/errors/`).

No key is in an error line or an error file: the values of `--api-key`/`--token` and of the
environment variables named like keys are redacted (`benchmarks.common.redaction`) from the command line
and the traceback they keep, and from whatever the command writes.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.errors import AtelierError

if TYPE_CHECKING:
    from atelier.benchmarks.common.redaction import Redactor

app = typer.Typer(
    name="atelier",
    help="Atelier: run personalized information-seeking agents against benchmarks, judges and simulated users.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Speed and memory benchmarks; each prints JSON.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# Each module defines `register(app, bench_app)`.
_COMMAND_MODULES = (
    "atelier.runs.cli.run",
    "atelier.runs.cli.recipe",
    "atelier.runs.cli.data",
    "atelier.runs.cli.metric",
    "atelier.runs.cli.memory",
    "atelier.runs.cli.web",
    "atelier.runs.cli.judges",
    "atelier.runs.cli.graph",
    "atelier.runs.cli.gateway",
    "atelier.runs.cli.model",
    "atelier.runs.cli.simulate",
    "atelier.runs.cli.runs",
    "atelier.runs.cli.catalog",
    "atelier.runs.cli.view",
    "atelier.runs.cli.plan",
    "atelier.runs.cli.check",
    "atelier.runs.cli.studio",
)
for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:
        if exc.name != _name:
            raise
        continue
    _module.register(app, bench_app)


EXIT_BAD_INPUT = 2
EXIT_BUG = 1


def _redactor() -> Redactor:
    """The keys this command knows without a run: its key options' values and the environment's."""
    from atelier.benchmarks.common.redaction import Redactor

    return Redactor.for_command_line(sys.argv[1:])


def _fail(message: str, code: int, redactor: Redactor) -> None:
    typer.secho(f"error: {redactor.redact(message)}", fg=typer.colors.RED, err=True)
    sys.exit(code)


def _write_traceback(exc: BaseException, redactor: Redactor) -> Path:
    """The full traceback of an unexpected error, kept in a file of its own (keys redacted)."""
    from datetime import datetime

    from atelier.benchmarks.data_files import cache_dir

    command = " ".join(redactor.redact_argv(sys.argv[1:]))
    text = redactor.redact("".join(traceback.format_exception(exc)))
    name = f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in (cache_dir() / "errors", Path(tempfile.gettempdir()) / "atelier-errors"):
        try:
            no_follow.make_folders(folder)
            write_atomically(folder / name, f"atelier {command}\n\n{text}", redact=False)  # redacted above
            return folder / name
        except OSError:
            continue
    raise exc


def main() -> None:
    from atelier.benchmarks.common.offline import apply_offline_defaults

    apply_offline_defaults()  # before any library a command drives is imported
    from atelier.benchmarks.common.redaction import redacting

    redactor = _redactor()
    try:
        # what any command writes (a gateway's ledger, a simulation's) leaves out the keys its command
        # line and environment give; a run installs its own redactor, which knows its recipe's keys too
        # (each recipe the command loads teaches it that recipe's keys: what it prints leaves them out)
        with redacting(redactor):
            code = app(standalone_mode=False)  # errors come here, to be told in one line
    except typer.TyperException as exc:  # click's errors (typer vendors click): a flag or argument refused
        if type(exc).__name__ == "NoArgsIsHelpError":  # `atelier` or `atelier bench` alone: the help
            exc.show()  # type: ignore[attr-defined]  # a method of typer's vendored click errors, not of TyperException
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx else ""
        _fail(" ".join(exc.format_message().split()) + where, exc.exit_code, redactor)
    except typer.Abort:
        _fail("aborted", 130, redactor)
    except AtelierError as exc:
        _fail(str(exc), EXIT_BAD_INPUT, redactor)
    except OSError as exc:  # a path given on the command line or in a recipe that cannot be used
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}", EXIT_BAD_INPUT, redactor)
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, the trace kept in a file
        trace = _write_traceback(exc, redactor)
        summary = " ".join(str(exc).split())[:300]
        _fail(f"unexpected {type(exc).__name__}: {summary} (a bug; full traceback in {trace})", EXIT_BUG, redactor)
    sys.exit(code or 0)
