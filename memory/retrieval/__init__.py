"""History retrieval for the `retrieval` backend: a per-user event store, a BM25 index, a dense
index in chromadb, and the fusion of rankings (methods, conversation turns)."""
