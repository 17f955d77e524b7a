"""Exact (brute-force) search: the ground truth every recall number uses."""
from __future__ import annotations

import numpy as np

from vecsift import _core
from vecsift._arrays import as_vectors, check_cells, check_k, check_threads
from vecsift.allow import allow_arrays

METRICS = ("ip", "l2", "cosine")


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return metric


def exact_search(base, queries, k: int, metric: str = "ip", allow=None, threads: int = 0):
    """Exact top-k of every query against every (allowed) row of base.

    Returns (ids int64 (n, k), scores float32 (n, k)), best first. Scores are
    similarities, higher is better: the inner product for "ip", the cosine
    similarity for "cosine" (zero-norm rows score 0), and the *negative squared
    L2 distance* for "l2". Ties are broken by the smaller row id. Where fewer
    than k rows are allowed, the rest of the row is padded with id -1 and
    score -inf. Multi-threaded (threads=0: all cores); the GIL is released.
    """
    check_metric(metric)
    k = check_k(k)
    threads = check_threads(threads)
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", dim=base.shape[1])
    check_cells(len(queries), k)
    mask, ids = allow_arrays(allow, base.shape[0])
    return _core.exact_search(base, queries, k, metric, mask, ids, threads)
