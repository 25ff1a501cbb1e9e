"""What a graph loads lazily on first use — libraries, the registries' modules, litellm's setup —
loaded at once where a server runs graphs on its event loop and refuses blocking calls there
(`langgraph dev`): an import reads files and the working folder (`os.getcwd`, `os.readlink`), and
two first uses in two threads at once can meet torch half-imported.

`graphs/studio.py` loads it when the server imports Atelier's graphs; a pipeline run alone — a
plugin's graph a `langgraph.json` serves without Atelier's — loads it off the event loop before its
first node's work (`graphs.start.start_inputs`, through `ready_for_server`)."""

from __future__ import annotations

import asyncio
import functools
import importlib

HEAVY = ("torch", "sentence_transformers", "chromadb", "trafilatura", "tiktoken")


def import_heavy_libraries() -> list[str]:
    """Import each of HEAVY that is installed; the names imported."""
    done = []
    for name in HEAVY:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        done.append(name)
    return done


@functools.cache
def load_for_server() -> None:
    """Everything a first model call, memory, judge, web search or case lookup would import on the
    event loop, imported now (once per process)."""
    from atelier.agents.judges.base import JUDGES
    from atelier.agents.models.litellm_setup import configured_litellm
    from atelier.benchmarks.common.offline import apply_offline_defaults
    from atelier.benchmarks.registry import BENCHMARKS
    from atelier.graphs.pipelines import PIPELINES
    from atelier.memory.registry import BACKENDS
    from atelier.tools.readers.registry import READERS
    from atelier.tools.search.registry import PROVIDERS

    apply_offline_defaults()
    configured_litellm()
    import_heavy_libraries()
    for registry in (PIPELINES, BACKENDS, JUDGES, BENCHMARKS, PROVIDERS, READERS):
        registry.names()


async def ready_for_server() -> None:
    """`load_for_server`, off the event loop (once: a thread hop per episode cost a graph run alone
    about a tenth of a millisecond)."""
    if not load_for_server.cache_info().currsize:
        await asyncio.to_thread(load_for_server)
