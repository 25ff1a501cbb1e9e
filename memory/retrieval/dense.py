"""Dense retrieval over one user's history: our embedder's vectors in chromadb, one collection per user.

A collection per user (named from a hash of the user id and the embedder, the user id kept in
its metadata and checked) means a search can only ever see that user's events. With a store
directory the client is a `PersistentClient`, so a later backend instance on the same store
finds the vectors and embeds nothing again; without one it is in memory (`EphemeralClient`, whose
state chromadb shares across the process, so each index instance prefixes its collections with
a namespace of its own and drops them on close). Vectors are always computed by our embedder and
passed in: chromadb's default embedding function would download a model.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from pathlib import Path
from typing import Sequence

from benchmarks.case import HistoryEvent
from benchmarks.errors import DataError
from memory.embedders import CachingEmbedder
from memory.retrieval.event_store import user_key


class DenseIndex:
    def __init__(self, embedder: CachingEmbedder, store_dir: Path | None) -> None:
        import chromadb
        from chromadb.config import Settings

        self.embedder = embedder
        self.store_dir = store_dir
        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        if store_dir is not None:
            store_dir.mkdir(parents=True, exist_ok=True)
            self._client = chromadb.PersistentClient(path=str(store_dir), settings=settings)
            self._namespace = ""
        else:
            self._client = chromadb.EphemeralClient(settings=settings)
            self._namespace = f"tmp{uuid.uuid4().hex[:12]}-"
        self._collections: dict[str, object] = {}
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _name(self, user_id: str) -> str:
        model = hashlib.sha256(self.embedder.name.encode("utf-8")).hexdigest()[:8]
        return f"{self._namespace}u{user_key(user_id)}-{model}"

    def _collection(self, user_id: str, create: bool):
        with self._lock:
            if user_id in self._collections:
                return self._collections[user_id]
            name = self._name(user_id)
            if create:
                collection = self._client.get_or_create_collection(
                    name,
                    embedding_function=None,
                    metadata={"user_id": user_id, "embedder": self.embedder.name},
                    configuration={"hnsw": {"space": "cosine"}},
                )
            else:
                from chromadb.errors import NotFoundError

                try:
                    collection = self._client.get_collection(name, embedding_function=None)
                except NotFoundError:
                    return None
            owner = (collection.metadata or {}).get("user_id")
            if owner != user_id:
                raise DataError(f"chromadb collection {name} belongs to user {owner!r}, not {user_id!r}", file=self.store_dir)
            self._collections[user_id] = collection
            self._counts[user_id] = collection.count()
            return collection

    def add(self, user_id: str, events: Sequence[HistoryEvent]) -> int:
        """Embed and store the events the user's collection does not hold yet; returns how many."""
        if not events:
            return 0
        collection = self._collection(user_id, create=True)
        first: dict[str, HistoryEvent] = {}
        for event in events:
            first.setdefault(event.id, event)
        step = self._client.get_max_batch_size()
        ids = list(first)
        present: set[str] = set()
        for start in range(0, len(ids), step):
            present.update(collection.get(ids=ids[start : start + step], include=[])["ids"])
        new = [e for e in first.values() if e.id not in present]
        if not new:
            return 0
        vectors = self.embedder.embed_documents([e.render() for e in new])
        for start in range(0, len(new), step):
            chunk = new[start : start + step]
            collection.add(ids=[e.id for e in chunk], embeddings=vectors[start : start + step])
        with self._lock:
            self._counts[user_id] = collection.count()
        return len(new)

    def search(self, user_id: str, queries: Sequence[str], top_n: int) -> list[dict[str, float]]:
        """Per query, the `top_n` nearest events: id -> cosine similarity, best first."""
        collection = self._collection(user_id, create=False)
        count = self._counts.get(user_id, 0)
        if collection is None or count == 0:
            return [{} for _ in queries]
        vectors = self.embedder.embed_queries(queries)
        result = collection.query(query_embeddings=vectors, n_results=min(top_n, count), include=["distances"])
        return [
            {event_id: 1.0 - float(distance) for event_id, distance in zip(ids, distances)}
            for ids, distances in zip(result["ids"], result["distances"])
        ]

    def close(self) -> None:
        """Forget the collections; an in-memory index also drops them from the shared client."""
        with self._lock:
            names = [c.name for c in self._collections.values()]
            self._collections.clear()
            self._counts.clear()
        if self._namespace:
            for name in names:
                self._client.delete_collection(name)
