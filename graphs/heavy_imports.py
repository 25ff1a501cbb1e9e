"""Libraries a graph loads lazily on first use, loaded at once where a server runs graphs on its
event loop and refuses blocking calls there (`langgraph dev`): an import reads files and the
working folder, and two first uses in two threads at once can meet torch half-imported."""

from __future__ import annotations

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
