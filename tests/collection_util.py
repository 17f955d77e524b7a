"""Shared data and references for the collection tests (generated, small)."""
import numpy as np


def clustered(n, dim, seed=0, clusters=20):
    """Gaussian clusters: realistic enough that binary codes and rescoring matter."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    x = centers[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    return x.astype(np.float32)


def unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def exact_ref(base, queries, k, metric, allowed=None):
    """numpy top-k similarities (cosine on unit rows, ip, -squared l2); ties by smaller row."""
    if metric == "cosine":
        base, queries = unit(base), unit(queries)
    if metric == "l2":
        s = -((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1)
    else:
        s = queries @ base.T
    if allowed is not None:
        mask = np.zeros(base.shape[0], bool)
        mask[np.asarray(list(allowed), dtype=np.int64)] = True
        s = np.where(mask[None, :], s, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(s, order, axis=1)


def ids_of(hits):
    return [h.id for h in hits]
