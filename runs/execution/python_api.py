"""Runs from Python (a notebook, a script): `atelier.run` and `atelier.arun` (also here).

    import atelier
    run = atelier.run("quickstart", limit=2)      # a shipped recipe's name, a TOML path, a dict or a Recipe
    run.summary, run.results, run.ledger, run.to_pandas()

`run` blocks until the run ends and is safe where an event loop is already running (Jupyter): the
run goes on in this process. In async code, `await atelier.arun(...)`: the run goes on in a fresh
Python process (`python -m atelier.runs.execution.python_api FOLDER`) — its imports, its set-up,
its episodes, its report — so the caller's loop (a notebook's widgets) never waits on it: a run in
a thread of the caller's process would share its GIL, and the garbage collections of a heap that
holds the run's libraries (0.1-0.35 s each on a first run, measured, and later runs' too) stop
every thread. The caller's side is the request (pickled: classes and functions by import path, an
object bound to a module-level name by that name; keys in a 0600 file, never on the command line),
the process's output copied to `sys.stdout` / `sys.stderr`, and the answer: the run folder and its
outcome, or the exception, raised here with its type and message. Cancelling the await closes the
process's stdin, on which it cancels the run (the folder stays resumable) and ends. A recipe naming
an object of `__main__` (a notebook cell's class), or one a fresh process cannot import, runs in a
thread of this process instead, with a note on stderr.

Overrides are the command line's (`model`, `limit`, `systems`, `concurrency`, `seed`, `epochs`,
`budget_usd`, `executor`, `ray_address`, `api_base`, `api_key`, `out_dir`), plus `out` (the run
folder: an existing one is resumed), `progress` (default off) and `preflight` (default on).

A dict recipe may hold the objects themselves where a recipe names a plugin — a memory backend or
judge class, a pipeline's graph factory or compiled graph, a benchmark's loader or `BenchmarkSpec`:
each is named by its import path (`module:attr`, as `config.json` records it), which must lead
back to the same object. One defined in `__main__` (a notebook cell, a script) is `__main__:Name`:
it runs in this process, and resuming or rescoring the run needs it defined there again; a run on
Ray refuses it (its workers import plugins by path).

This module imports nothing of Atelier's at import time: `atelier.arun` costs the caller's loop
nothing to look up.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import collections
import concurrent.futures
import contextlib
import datetime
import importlib
import inspect
import io
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from enum import Enum
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from atelier.runs.execution.runner import Runner
    from atelier.runs.folder.recipe import Recipe
    from atelier.runs.reading.run_handle import Run

RUN_OPTIONS = ("out", "progress", "preflight")


def recipe_overrides() -> tuple[str, ...]:
    """What `Recipe.with_overrides` takes: the command line's overrides."""
    from atelier.runs.folder.recipe import Recipe

    return tuple(p for p in inspect.signature(Recipe.with_overrides).parameters if p != "self")


def as_recipe(recipe_or_path: Recipe | dict[str, Any] | str | Path) -> Recipe:
    """A Recipe from itself, recipe data (a dict as the TOML would hold it, plugin objects named by
    their import path), a TOML file's path, or the name of a shipped recipe (`quickstart`)."""
    from atelier.runs.folder.recipe import Recipe, load_recipe, named_plugin_objects, parse_recipe

    if isinstance(recipe_or_path, Recipe):
        return recipe_or_path
    if isinstance(recipe_or_path, dict):
        return parse_recipe(named_plugin_objects(recipe_or_path, source="<dict>"), source="<dict>")
    return load_recipe(recipe_or_path if isinstance(recipe_or_path, str) else Path(recipe_or_path).expanduser())


def runner_for(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Runner:
    """The Runner of `recipe_or_path` with `overrides` (a ConfigError names an unknown one)."""
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.benchmarks.common.suggest import did_you_mean
    from atelier.runs.execution.runner import Runner
    from atelier.runs.folder.recipe import plugins_used

    known = recipe_overrides()
    unknown = sorted(set(overrides) - set(known) - set(RUN_OPTIONS))
    if unknown:
        hint = did_you_mean(unknown[0], (*known, *RUN_OPTIONS))
        raise ConfigError(
            f"unknown override {', '.join(map(repr, unknown))}; valid: {', '.join((*known, *RUN_OPTIONS))}"
            + (f"; {hint}" if hint else "")
        )
    recipe = as_recipe(recipe_or_path).with_overrides(**{k: v for k, v in overrides.items() if k in known})
    in_main = [p["target"] for p in plugins_used(recipe) if p["target"].startswith("__main__:")]
    if in_main and recipe.run.executor == "ray":
        raise ConfigError(
            f"{', '.join(in_main)}: defined in __main__, which Ray's workers cannot import; move it into a "
            "module of your own and pass it from there"
        )
    out = overrides.get("out")
    return Runner(
        recipe,
        Path(out).expanduser() if out is not None else None,
        progress=bool(overrides.get("progress", False)),
        preflight=bool(overrides.get("preflight", True)),
    )


async def _run_here(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Run:
    """The run, start to end, on the current loop (of this process, the run's process or thread)."""
    from atelier.runs.reading.run_handle import Run

    runner = runner_for(recipe_or_path, overrides)
    folder = await runner.run()
    return Run(folder.path, outcome=runner.outcome)


# ------------------------------------------------------------------ arun: the run in a process of its own

STOP_GRACE_S = 30.0  # a cancelled run's process ends by itself within this, or is killed
RELAY_GRACE_S = 5.0
_PLAIN = (str, bytes, int, float, complex, bool, type(None), dict, list, tuple, set, frozenset, PurePath, Enum)
_PLAIN_TIMES = (datetime.date, datetime.time, datetime.timedelta)


class _HereOnly(Exception):
    """What a request holds that only this process has (a `__main__` object): its run stays here."""


class _RequestPickler(pickle.Pickler):
    """Pickles a request as the run's process must read it: classes and functions by import path
    (as pickle does), an object of another kind bound to a module-level name (a compiled graph, a
    BenchmarkSpec) by that name, so the run's process loads the very object a plugin reference
    names; one of `__main__` (a notebook cell's, a script's) raises `_HereOnly`."""

    def persistent_id(self, obj: Any) -> str | None:
        if isinstance(obj, str):
            if obj.startswith("__main__:"):
                raise _HereOnly(f"{obj} names an object of __main__, which a fresh process cannot import")
            return None
        if isinstance(obj, type) or inspect.isroutine(obj):
            if getattr(obj, "__module__", None) == "__main__":
                raise _HereOnly(
                    f"__main__:{getattr(obj, '__qualname__', obj)} is defined in __main__, which a fresh process "
                    "cannot import"
                )
            return None  # pickled by its module and name; one with none fails to pickle
        if isinstance(obj, _PLAIN + _PLAIN_TIMES) or _is_pydantic_model(obj):
            return None
        from atelier.benchmarks.common.plugins import PluginError, reference_of

        try:
            reference = reference_of(obj)
        except PluginError:
            return None  # by value; a recipe value, or a plugin the run's own check refuses by its key
        if reference.startswith("__main__:"):
            raise _HereOnly(f"{reference} is bound in __main__, which a fresh process cannot import")
        return reference


class _RequestUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        from atelier.benchmarks.common.plugins import load_reference

        return load_reference(str(pid))


def _is_pydantic_model(obj: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(obj, pydantic.BaseModel)


def _request(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> bytes | str:
    """The run's request as its own process reads it (`sys.path` and the pickled arguments), or why
    it must run in this process: it names an object of `__main__`, which a fresh process cannot
    import, or holds what cannot be pickled (the run in this process then refuses it, by its key)."""
    if isinstance(recipe_or_path, str | Path):  # a TOML recipe naming `__main__:X` (a notebook's own class)
        path = Path(recipe_or_path).expanduser()
        with contextlib.suppress(OSError):
            if path.is_file() and b"__main__:" in path.read_bytes():
                return f"{path} names an object of __main__, which a fresh process cannot import"
    buffer = io.BytesIO()
    try:
        _RequestPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((recipe_or_path, overrides))
    except _HereOnly as here:
        return str(here)
    except Exception as exc:  # noqa: BLE001 - whatever pickle refuses (a local class, a lock) stays here
        return f"the recipe holds what cannot be sent to another process ({type(exc).__name__}: {exc})"
    return pickle.dumps({"sys_path": list(sys.path), "request": buffer.getvalue()})


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` readable by this user only (0600): a request can hold keys."""
    from atelier.benchmarks.common.no_follow import open_fd  # 3 ms, and only when a run starts

    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


async def _relay(stream: asyncio.StreamReader, name: str, tail: collections.deque[str]) -> None:
    """Copy the run's process's output to this process's `sys.<name>` (a notebook's cell output)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := await stream.read(65536):
        text = decoder.decode(chunk)
        tail.append(text)
        target = getattr(sys, name)
        if target is not None and text:
            target.write(text)
            target.flush()


def _child_env() -> dict[str, str]:
    """This process's environment (keys included: never on the command line), with UTF-8 output;
    a terminal here tells the run's progress bar it draws on one."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
    stdout = sys.stdout
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if stdout is not None and stdout.isatty():
            env.update(TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")
            env.setdefault("COLUMNS", str(shutil.get_terminal_size().columns))
    return env


async def _arun_in_process(
    recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any], request: bytes
) -> Run:
    """The run in a fresh Python process: its imports, its heap and their collections, its plots
    are its own. A folder of this user's (0700, removed after) holds the request (0600) and the
    answer; the process's output is copied to this process's stdout and stderr; cancelling closes
    its stdin, on which it cancels the run and ends, as the thread does."""
    folder = Path(tempfile.mkdtemp(prefix="atelier-arun-"))
    try:
        _write_private(folder / "request", request)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",  # not the working directory first: a folder there named `atelier` is not Atelier
                "-m",
                __name__,
                str(folder),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_child_env(),
                start_new_session=True,  # a terminal's Ctrl-C reaches this process, which stops the run's
            )
        except NotImplementedError:  # a loop that starts no processes (a selector loop on Windows)
            _note("this event loop cannot start a process")
            return await _arun_in_thread(recipe_or_path, overrides)
        answer, code, tail = await _awaited(process, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if answer is None:
        said = "".join(tail).strip()[-2000:]
        raise RuntimeError(
            f"the run's process ended (exit code {code}) without an answer" + (f": {said}" if said else "")
        )
    kind, *rest = answer
    if kind == "ok":
        from atelier.runs.reading.run_handle import Run

        path, outcome = rest
        return Run(Path(path), outcome=outcome)
    if kind == "unloadable":  # the caller's process has what a fresh one cannot import
        _note(f"a fresh process cannot load what the recipe holds ({rest[0]})")
        return await _arun_in_thread(recipe_or_path, overrides)
    if kind == "cancelled":
        raise asyncio.CancelledError("the run's process was stopped")
    raise _child_error(*rest)


async def _awaited(
    process: asyncio.subprocess.Process, folder: Path
) -> tuple[tuple[Any, ...] | None, int | None, collections.deque[str]]:
    """The run's process, to its end: its answer (None: it ended without one), its exit code and
    the tail of its output. Cancelled, it has the process end (killed after STOP_GRACE_S)."""
    assert process.stdout is not None and process.stderr is not None and process.stdin is not None
    tail: collections.deque[str] = collections.deque(maxlen=40)
    relays = [
        asyncio.create_task(_relay(stream, name, tail))
        for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))
    ]
    # what reading the answer needs, imported meanwhile off this loop
    reader = asyncio.create_task(asyncio.to_thread(importlib.import_module, "atelier.runs.reading.run_handle"))
    try:
        code = await process.wait()
        await reader
        # its output to its end, unless a process it started (a model server) holds the pipes open
        await asyncio.wait(relays, timeout=RELAY_GRACE_S)
        return await asyncio.to_thread(_read_answer, folder / "answer"), code, tail
    except asyncio.CancelledError:
        process.stdin.close()  # the run's process cancels its run and ends
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        raise
    finally:
        if process.returncode is None:  # cancelled again while it was ending
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for task in (*relays, reader):
            task.cancel()


def _read_answer(path: Path) -> tuple[Any, ...] | None:
    try:
        with path.open("rb") as fh:
            return cast("tuple[Any, ...]", pickle.load(fh))
    except FileNotFoundError:
        return None


def _child_error(error: BaseException | None, kind: str, message: str, trace: str) -> BaseException:
    """The exception the run's process raised, as the caller sees it: the same type and message; an
    unexpected one (not an AtelierError) notes where it came from, with that process's traceback."""
    from atelier.benchmarks.common.errors import AtelierError

    if error is None:  # it did not pickle: the same type, if it takes its message alone
        module, _, name = kind.partition(":")
        try:
            error = getattr(importlib.import_module(module), name)(message)
        except Exception:  # noqa: BLE001 - a type that cannot be rebuilt is named in the message instead
            error = RuntimeError(f"{name}: {message}")
    assert error is not None
    if not isinstance(error, AtelierError):
        error.add_note(f"raised in the run's own process:\n{trace.rstrip()}")
    return error


def _note(why: str) -> None:
    if sys.stderr is not None:
        print(
            f"note: {why}: the run goes on in a thread of this process instead, whose loop it may pause "
            "(docs/notebooks.md)",
            file=sys.stderr,
        )


def _answer(folder: Path, answer: tuple[Any, ...]) -> None:
    try:
        data = pickle.dumps(answer)
        pickle.loads(data)  # an exception whose constructor wants more than its args does not load back
    except Exception:  # noqa: BLE001 - an exception that does not pickle goes as its type, message and traceback
        kind, error, *rest = answer
        data = pickle.dumps((kind, None, *rest))
    _write_private(folder / "answer", data)


async def _run_until_stopped(recipe_or_path: Any, overrides: dict[str, Any], caller_gone: threading.Event) -> Run:
    """The run in the run's process; the end of its stdin (the caller cancelled, or died: then
    `caller_gone` is set) or a SIGTERM cancels it, as a cancelled `arun` does in a thread."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None

    def watch_stdin() -> None:
        while os.read(0, 4096):
            pass
        caller_gone.set()
        with contextlib.suppress(RuntimeError):  # the run has ended and its loop closed
            loop.call_soon_threadsafe(task.cancel)

    threading.Thread(target=watch_stdin, name="atelier-arun-stdin", daemon=True).start()
    with contextlib.suppress(NotImplementedError):  # no signal handlers (Windows): its stdin still stops it
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    return await _run_here(recipe_or_path, overrides)


def _ran(recipe_or_path: Any, overrides: dict[str, Any], caller_gone: threading.Event) -> tuple[Any, ...]:
    """The answer to the caller: `ok` (the run folder and outcome), `cancelled`, or the `error`
    (itself, its type's import path, message and traceback)."""
    try:
        run = asyncio.run(_run_until_stopped(recipe_or_path, overrides, caller_gone))
    except (asyncio.CancelledError, KeyboardInterrupt):
        return ("cancelled",)
    except BaseException as exc:  # noqa: BLE001 - the caller raises it
        return ("error", exc, f"{type(exc).__module__}:{type(exc).__qualname__}", str(exc), traceback.format_exc())
    return ("ok", str(run.path), run.outcome)


def serve(folder: Path) -> None:
    """The run's process: read the request, run it, write the answer (`ok`, `error`, `cancelled`,
    or `unloadable` when a reference does not import here); stopped by its caller, it removes the
    folder instead (nobody reads it: the caller has cancelled, or died)."""
    done: list[bool] = []

    def end_now() -> None:  # the last exit function: what the others left to do is freeing the heap
        if done:  # answered: skip that (seconds, after a run's imports), the caller waits on it
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, OSError, ValueError):
                    stream.flush()
            os._exit(0)

    atexit.register(end_now)  # first registered, last run: after the run's own (servers, workers, logging)
    envelope = pickle.loads((folder / "request").read_bytes())
    (folder / "request").unlink()
    sys.path[:] = envelope["sys_path"]
    caller_gone = threading.Event()
    try:
        recipe_or_path, overrides = _RequestUnpickler(io.BytesIO(envelope["request"])).load()
    except Exception as exc:  # noqa: BLE001 - told to the caller, whose own process then runs it
        answer: tuple[Any, ...] = ("unloadable", f"{type(exc).__name__}: {exc}")
    else:
        answer = _ran(recipe_or_path, overrides, caller_gone)
    if caller_gone.is_set():
        shutil.rmtree(folder, ignore_errors=True)
    else:
        _answer(folder, answer)
    done.append(True)


# ------------------------------------------------------------------ arun: the run in a thread of this process


def _run_in_thread(
    recipe_or_path: Recipe | dict[str, Any] | str | Path,
    overrides: dict[str, Any],
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[Run]]],
) -> Run:
    """The run on a loop of this thread's own; `started` learns its loop and task (to cancel it)."""

    async def main() -> Run:
        task = asyncio.current_task()
        assert task is not None
        started.set_result((asyncio.get_running_loop(), task))
        return await _run_here(recipe_or_path, overrides)

    return asyncio.run(main())


async def _arun_in_thread(recipe_or_path: Recipe | dict[str, Any] | str | Path, overrides: dict[str, Any]) -> Run:
    """The run in a thread with its own event loop (what `__main__`'s objects need): nothing of it
    runs on the caller's loop, but it shares this process's GIL and heap."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Run] = loop.create_future()
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[Run]]] = (
        concurrent.futures.Future()
    )

    def settle(result: Run | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(cast("Run", result))
        else:
            done.set_exception(error)

    def work() -> None:
        result, error = None, None
        try:
            result = _run_in_thread(recipe_or_path, overrides, started)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's await, which raises it
            error = exc
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody awaits the run
            loop.call_soon_threadsafe(settle, result, error)

    thread = threading.Thread(target=work, name="atelier-run")
    thread.start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        done.cancel()  # what the run's thread still hands over is dropped, not left unretrieved
        run_loop, task = await asyncio.wrap_future(started)  # set as soon as the run's loop starts
        with contextlib.suppress(RuntimeError):  # that loop closed: the run has ended
            run_loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(thread.join)
        raise


async def arun(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """`run`, awaited. The run goes on in a fresh Python process (a thread of this one when it
    names an object of `__main__`), so nothing of it — imports, loading the recipe and the cases,
    building graphs, the episodes, the report — runs on the caller's loop or holds its GIL;
    cancelling this await cancels the run and waits for its process (or thread) to end."""
    request = _request(recipe_or_path, overrides)
    if isinstance(request, str):
        _note(request)
        return await _arun_in_thread(recipe_or_path, overrides)
    return await _arun_in_process(recipe_or_path, overrides, request)


def run(recipe_or_path: Recipe | dict[str, Any] | str | Path, **overrides: Any) -> Run:
    """Run a recipe to its end and return the `Run`. Inside a running event loop (Jupyter), the run
    goes on in a thread with a loop of its own while this call waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run_here(recipe_or_path, overrides))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="atelier-run") as pool:
        return pool.submit(lambda: asyncio.run(_run_here(recipe_or_path, overrides))).result()


if __name__ == "__main__":  # the run's own process, started by `arun`
    from atelier.runs.execution.python_api import serve as _serve

    _serve(Path(sys.argv[1]))
