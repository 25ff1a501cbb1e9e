"""Dense retrieval over one user's history: our embedder's vectors in chromadb, one collection per user.

A collection per user (named from a hash of the user id and the embedder, the user id kept in
its metadata and checked) means a search can only ever see that user's events. With a store
directory the client is a `PersistentClient`, so a later backend instance on the same store
finds the vectors and embeds nothing again; without one it is in memory (`EphemeralClient`, whose
state chromadb shares across the process, so each index instance prefixes its collections with
a namespace of its own and drops them on close). Vectors are always computed by our embedder and
passed in: chromadb's default embedding function would download a model.

An event longer than `passage_words` words is embedded as overlapping passages of that length
(MiniLM reads only its first 256 word pieces, about 190 words) and scores as its best passage.
The first passage is stored under the event's id, passage i > 0 under `<event id>\\x1f<i>` (the
ASCII unit separator, which event ids may not hold), and the first is written last, so an event
whose first passage is in the store is there whole.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import DataError
from atelier.memory.embedders import CachingEmbedder
from atelier.memory.retrieval.event_store import user_key

if TYPE_CHECKING:  # imported where used: chromadb is slow to import
    from chromadb.api.models.Collection import Collection

PASSAGE_SEPARATOR = "\x1f"


def passages(text: str, words: int, overlap: int) -> list[str]:
    """`text` as windows of `words` words, each starting `words - overlap` words after the last;
    a text of at most `words` words is its own single passage."""
    tokens = text.split()
    if len(tokens) <= words:
        return [text]
    step = words - overlap
    starts = range(0, len(tokens) - overlap, step)
    return [" ".join(tokens[start : start + words]) for start in starts]


def _best_per_event(passage_ids: Sequence[str], distances: Sequence[float], top_n: int) -> dict[str, float]:
    """The first `top_n` events of a nearest-first passage list: event id -> its best cosine similarity."""
    best: dict[str, float] = {}
    for passage_id, distance in zip(passage_ids, distances):
        best.setdefault(passage_id.partition(PASSAGE_SEPARATOR)[0], 1.0 - float(distance))
        if len(best) == top_n:
            break
    return best


class DenseIndex:
    def __init__(
        self, embedder: CachingEmbedder, store_dir: Path | None, passage_words: int = 150, passage_overlap: int = 30
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        self.embedder = embedder
        self.store_dir = store_dir
        self.passage_words = passage_words
        self.passage_overlap = passage_overlap
        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        if store_dir is not None:
            no_follow.make_folders(store_dir)
            self._client = chromadb.PersistentClient(path=str(store_dir), settings=settings)
            self._namespace = ""
        else:
            self._client = chromadb.EphemeralClient(settings=settings)
            self._namespace = f"tmp{uuid.uuid4().hex[:12]}-"
        self._collections: dict[str, Collection] = {}
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _name(self, user_id: str) -> str:
        scheme = f"{self.embedder.name}|passages:{self.passage_words}/{self.passage_overlap}"
        return f"{self._namespace}u{user_key(user_id)}-{hashlib.sha256(scheme.encode('utf-8')).hexdigest()[:8]}"

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
                raise DataError(
                    f"chromadb collection {name} belongs to user {owner!r}, not {user_id!r}", file=self.store_dir
                )
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
        ids, texts = [], []
        for event in new:
            if PASSAGE_SEPARATOR in event.id:
                raise DataError(
                    f"history event id {event.id!r} holds the character \\x1f, which dense retrieval reserves"
                )
            parts = passages(event.render(), self.passage_words, self.passage_overlap)
            for index in [*range(1, len(parts)), 0]:  # the passage under the event's own id last
                ids.append(f"{event.id}{PASSAGE_SEPARATOR}{index}" if index else event.id)
                texts.append(parts[index])
        vectors = self.embedder.embed_documents(texts)
        for start in range(0, len(ids), step):
            collection.upsert(ids=ids[start : start + step], embeddings=vectors[start : start + step])
        with self._lock:
            self._counts[user_id] = collection.count()
        return len(new)

    def count(self, user_id: str) -> int:
        """Passages stored for the user (0 when there is no collection of theirs)."""
        if self._collection(user_id, create=False) is None:
            return 0
        return self._counts.get(user_id, 0)

    def search(self, user_id: str, queries: Sequence[str], top_n: int) -> list[dict[str, float]]:
        """Per query, the `top_n` nearest events: id -> cosine similarity, best first."""
        collection = self._collection(user_id, create=False)
        count = self._counts.get(user_id, 0)
        if collection is None or count == 0:
            return [{} for _ in queries]
        vectors = self.embedder.embed_queries(queries)
        depth = top_n
        while True:  # passages of one event can take several of the nearest places: then look deeper
            result = collection.query(query_embeddings=vectors, n_results=min(depth, count), include=["distances"])
            rankings = [
                _best_per_event(ids, distances, top_n) for ids, distances in zip(result["ids"], result["distances"])
            ]
            if depth >= count or all(len(ranking) == top_n for ranking in rankings):
                return rankings
            depth *= 2

    def close(self) -> None:
        """Forget the collections; an in-memory index also drops them from the shared client."""
        with self._lock:
            names = [c.name for c in self._collections.values()]
            self._collections.clear()
            self._counts.clear()
        if self._namespace:
            for name in names:
                self._client.delete_collection(name)
