"""Shared test set-up: an isolated cache per session, and a tiny benchmark for graph/run tests."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from importlib.metadata import EntryPoint, EntryPoints, entry_points

import pytest

# Bytecode is cached for this session's imports and for every process it starts, whatever
# PYTHONDONTWRITEBYTECODE says (some CI images set it): README's install skips byte-compiling
# (--no-compile) on the promise that modules compile as they are first imported, and without this
# every `atelier` process a test starts compiles litellm and the stack from source again (~1.2 s of
# a 4.4 s start) and each worker re-rewrites every test module's asserts.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Before any Atelier import: keep the user's caches untouched by the tests.
_SESSION_CACHE = tempfile.mkdtemp(prefix="atelier-test-cache-")
os.environ["ATELIER_CACHE_DIR"] = _SESSION_CACHE
os.environ["ATELIER_STATE_DIR"] = _SESSION_CACHE

from atelier.benchmarks.common.offline import apply_offline_defaults  # noqa: E402

apply_offline_defaults()  # as every entry point does (the CLI, Studio's graphs, a run)

from atelier.benchmarks.common import plugins as _plugins  # noqa: E402


def _installed_where(entry: EntryPoint) -> tuple[str, str] | None:
    """The distribution declaring `entry` and the sys.path folder it is installed in."""
    return None if entry.dist is None else (entry.dist.name, str(entry.dist.locate_file("")))


def pytest_configure(config: pytest.Config) -> None:
    """The tests see Atelier's built-ins and the plugins they install themselves, not the plugins
    installed in the environment they run in (examples/mylab, which CI installs into .venv after
    the tests, or a developer's own): those would join every registry a test enumerates as the
    built-ins (the grid of pipelines x backends, the kit on every backend, the judges' roles), at
    collection already. Entry points are discovered as ever, less those of the distributions
    installed when the session began; a test's own (a .dist-info in a folder it puts on sys.path)
    are found. Processes the tests start see the environment whole."""
    installed = {_installed_where(entry) for entry in entry_points(group=_plugins.GROUP)} - {None}

    def discovered(*, group: str) -> EntryPoints:
        return EntryPoints(e for e in entry_points(group=group) if _installed_where(e) not in installed)

    _plugins.entry_points = discovered  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    _plugins.entry_points = entry_points


@pytest.fixture(autouse=True)
def _references_stay_with_their_test():
    """The `module:attr` plugins a test loads by reference are forgotten when it ends: a registry
    lists them as valid names for the rest of its process (as a notebook that loaded one should), so
    one test's reference (mylab's `Strict` judge) showed in another's "valid: ..." message, in
    whichever worker ran both (--dist loadfile)."""
    from atelier.agents.judges.base import JUDGES
    from atelier.benchmarks.registry import BENCHMARKS
    from atelier.graphs.pipelines import PIPELINES
    from atelier.memory.registry import BACKENDS
    from atelier.tools.readers.registry import READERS
    from atelier.tools.search.registry import PROVIDERS

    registries = (JUDGES, BENCHMARKS, PIPELINES, BACKENDS, READERS, PROVIDERS)
    held = [dict(registry._references) for registry in registries]
    yield
    for registry, references in zip(registries, held, strict=True):
        registry._references.clear()
        registry._references.update(references)


from atelier.benchmarks.case import Case, ChatMessage, ChatSession, Gold, MemorySnippet, Persona, Query, RubricAspect  # noqa: E402
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark  # noqa: E402

GOLD_SENTINEL = "GOLD-SENTINEL-7f3a"


def tiny_cases(request: LoadRequest) -> list[Case]:
    """Three cases of two users; gold fields carry a sentinel no system prompt may contain."""
    history = {
        "u1": [
            MemorySnippet(id="u1:m1", text="I am vegetarian and allergic to soy.", timestamp="2025-03-01"),
            MemorySnippet(id="u1:m2", text="I train for a half marathon on weekends.", timestamp="2025-04-01"),
            ChatSession(
                id="u1:c1",
                timestamp="2025-05-01",
                messages=[
                    ChatMessage(role="user", content="Give me short answers with bullet points, please."),
                    ChatMessage(role="assistant", content="Sure, I will keep it brief."),
                ],
            ),
        ],
        "u2": [
            MemorySnippet(id="u2:m1", text="Ich lerne gerade Spanisch — 東京に住んでいます.", timestamp="2024-01-01")
        ],
    }
    cases = []
    for i, (user, question) in enumerate(
        [
            ("u1", "Plan my meals for a training week."),
            ("u1", "Which running shoes should I buy?"),
            ("u2", "How do I practise languages daily?"),
        ]
    ):
        cases.append(
            Case(
                id=f"tiny:{i}",
                benchmark="tiny",
                user_id=user,
                setting=request.setting,
                query=Query(text=question),
                history=history[user],
                persona=Persona(user_id=user, attributes={"Basic Attributes": {"Occupation": f"tester {user}"}}),
                gold=Gold(
                    information_need=f"{GOLD_SENTINEL} need {i}",
                    rubric_aspects=[
                        RubricAspect(aspect=f"{GOLD_SENTINEL} aspect {i}.{k}", reason="because", evidence="e")
                        for k in range(2)
                    ],
                    relevant_history_ids=[history[user][0].id],
                ),
            )
        )
    return cases[: request.limit] if request.limit else cases


register_benchmark(
    BenchmarkSpec(
        name="tiny",
        description="three test cases",
        splits=("all",),
        settings=("context", "task_only", "persona", "persona+context"),
        load=tiny_cases,
    )
)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh Atelier cache for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(path))
    return path


class _CheckpointTypeLog(logging.Handler):
    """LangGraph *logs* (it does not warn) when a checkpoint holds a type its serializer does not
    know, so `-W error` cannot catch it: this handler collects those lines instead."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "unregistered type" in message or "Blocked deserialization" in message:
            self.lines.append(message)


_CHECKPOINT_TYPES = _CheckpointTypeLog()
logging.getLogger("langgraph.checkpoint.serde.jsonplus").addHandler(_CHECKPOINT_TYPES)


@pytest.fixture(autouse=True)
def _scripted_attempts_counted_afresh():
    """Each test's scripted faults as in a fresh process, whatever ran before it in this worker."""
    from atelier.agents.models.scripted import forget_attempts

    forget_attempts()


@pytest.fixture(autouse=True)
def _checkpoint_types_are_registered():
    """Fails the test during which LangGraph met a state type graphs/serde.py does not register."""
    seen = len(_CHECKPOINT_TYPES.lines)
    yield
    if len(_CHECKPOINT_TYPES.lines) > seen:
        pytest.fail("register the type in graphs/serde.py STATE_TYPES: " + "; ".join(_CHECKPOINT_TYPES.lines[seen:]))
