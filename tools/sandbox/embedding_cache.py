"""Embeddings of a corpus, computed once per (corpus content, embedder) and kept on disk."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from atelier.agents.models.embeddings import Embedder
from atelier.benchmarks.common.atomic_files import atomic_writer
from atelier.benchmarks.data_files import cache_dir
from atelier.tools.sandbox.corpus import Corpus, Document

MAX_CHARS = 1500  # MiniLM reads 256 word pieces; longer text is wasted work

logger = logging.getLogger(__name__)


def embedding_text(document: Document) -> str:
    return f"{document.title}. {document.description}. {document.text}"[:MAX_CHARS]


def embeddings_path(corpus: Corpus, embedder: Embedder) -> Path:
    safe_name = embedder.name.replace("/", "_")
    return cache_dir() / "sandbox" / "embeddings" / f"{corpus.fingerprint[:24]}-{safe_name}.npy"


def corpus_embeddings(corpus: Corpus, embedder: Embedder) -> np.ndarray:
    path = embeddings_path(corpus, embedder)
    if path.exists():
        matrix = np.load(path)
        if matrix.shape[0] == len(corpus):
            return matrix
    # a warning, not info: on two cores the 10k wiki corpus takes minutes, and only the first time
    logger.warning(
        "embedding %d documents of corpus %r with %s once; cached at %s", len(corpus), corpus.name, embedder.name, path
    )
    matrix = embedder.embed([embedding_text(document) for document in corpus.documents])
    with atomic_writer(path) as out:
        np.save(out, matrix)
    return matrix
