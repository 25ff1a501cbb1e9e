"""The local embedder: normalised MiniLM vectors, the same model in float32, bfloat16 and int8."""

from __future__ import annotations

import numpy as np

from atelier.agents.models.embeddings import get_embedder

TEXTS = ["I am vegetarian and allergic to soy.", "Cheap train tickets from Lisbon to Porto.", "我喜欢喝乌龙茶"]


def test_local_embedder_gives_unit_vectors_that_separate_topics():
    embedder = get_embedder("local")
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = embedder.embed(["a vegan diet without soy"])[0]
    assert int(np.argmax(vectors @ query)) == 0
    assert get_embedder("local") is embedder  # one model per process
    assert embedder.embed([]).shape == (0, 384)


def test_bfloat16_embedder_is_the_same_model():
    full, half = get_embedder("local").embed(TEXTS), get_embedder("local-bf16").embed(TEXTS)
    assert half.dtype == np.float32 and np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(full * half, axis=1)) > 0.99


def test_int8_embedder_is_the_same_model_under_its_own_name():
    full, int8 = get_embedder("local"), get_embedder("local-int8")
    assert int8.name != full.name  # a store keyed on the name never mixes their vectors
    a, b = full.embed(TEXTS), int8.embed(TEXTS)
    assert b.dtype == np.float32 and np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(a * b, axis=1)) > 0.9
    query = int8.embed(["a vegan diet without soy"])[0]
    assert int(np.argmax(b @ query)) == 0
