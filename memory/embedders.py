"""The embedder behind memory's dense index: which model, and a cache of query vectors.

`memory_embedder(model, api_base, api_key_env)` resolves the local MiniLM ("local", the offline
default) or any litellm embedding model (`agents.models.embeddings`). Documents are embedded in batches
and never cached (each is embedded once, at ingest); queries go through an LRU cache because a
conversation repeats its earlier turns in every later query and evaluations repeat queries.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np
from cachetools import LRUCache

from atelier.agents.models.embeddings import Embedder, get_embedder
from atelier.benchmarks.common.errors import ConfigError


class CachingEmbedder:
    """An `Embedder` with batched document embedding and an LRU cache of query vectors."""

    def __init__(self, embedder: Embedder, batch_size: int = 256, cache_size: int = 4096) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.documents_embedded = 0  # how many document texts this instance sent to the model
        self._queries: LRUCache[str, np.ndarray] = LRUCache(maxsize=cache_size)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.embedder.name

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        parts = [
            self.embedder.embed(list(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)
        ]
        self.documents_embedded += len(texts)
        return np.concatenate(parts) if parts else np.zeros((0, self.embedder.dim), dtype=np.float32)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            known = {t: self._queries[t] for t in texts if t in self._queries}  # [] marks each as used
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = dict(zip(missing, self.embedder.embed(missing)))
            known.update(fresh)
            with self._lock:
                self._queries.update(fresh)
        return np.stack([known[t] for t in texts])


def memory_embedder(
    model: str, api_base: str | None = None, api_key_env: str | None = None, batch_size: int = 256
) -> CachingEmbedder:
    """The embedder named `model`; an API key, if the model needs one, comes from `api_key_env`."""
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise ConfigError(f"embedder_api_key_env names {api_key_env!r}, but that environment variable is not set")
    return CachingEmbedder(get_embedder(model, api_base=api_base, api_key=api_key), batch_size=batch_size)
