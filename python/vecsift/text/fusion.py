"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009).

    score(d) = sum_i  w_i / (k + rank_i(d))

rank_i(d) is d's 1-based position in list i; a list where d is absent adds
nothing. Scores of the input lists are not used, only their order, so lists
of incomparable scores (BM25 and cosine) fuse without calibration.

The fusion runs in the native core (cpp/include/vecsift/fusion.hpp): one sort
of the entries, no JIT to warm up. A numpy version took a dozen calls and ~40
us for two lists of 100, more than the BM25 search feeding it; this takes ~8 us
with the argument checks here (bench/bench_collection_sparse.py prints it).
"""
from __future__ import annotations

from itertools import accumulate
from math import isfinite

import numpy as np

from vecsift import _core


def rrf(ranked_lists, k: float = 60, weights=None, top_n=None, return_ranks: bool = False):
    """Fuse ranked lists of ids (each best first; -1 entries are padding and
    skipped; a repeated id counts at its first position).

    Returns (ids int64, scores float64) sorted by fused score, best first, ties
    by the better (smaller) best rank, then the smaller id; top_n keeps only
    the first top_n. With return_ranks=True also returns ranks, an int64
    array (len(ids), len(ranked_lists)) of each id's 1-based rank in each list,
    0 where the list does not contain it (what a hit's dense_rank/sparse_rank
    reports).
    """
    lists = [np.asarray(r).ravel() for r in ranked_lists]
    for i, r in enumerate(lists):
        if r.size and r.dtype.kind not in "iu":
            raise TypeError(f"ranked_lists[{i}] must hold integer ids, got dtype {r.dtype}")
        if r.dtype == np.uint64 and r.size and r.max() >= 2**63:
            raise ValueError(f"ranked_lists[{i}] holds an id >= 2**63 (ids are int64)")
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) or not isfinite(k) or k < 0:
        raise ValueError(f"k must be a finite number >= 0, got {k!r}")
    if weights is None:
        w = np.ones(len(lists))
    else:
        w = np.asarray(weights, dtype=np.float64).ravel()
        if w.shape[0] != len(lists):
            raise ValueError(f"weights has {w.shape[0]} entries for {len(lists)} lists")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("weights must be finite and >= 0")
    if top_n is not None and (isinstance(top_n, bool) or int(top_n) != top_n or top_n < 0):
        raise ValueError(f"top_n must be a non-negative integer or None, got {top_n!r}")
    sizes = [0] + [r.size for r in lists]
    bounds = np.array(list(accumulate(sizes)), np.int64)
    flat = np.concatenate(lists).astype(np.int64, copy=False) if lists else np.empty(0, np.int64)
    ids, scores, ranks = _core.rrf_fuse(flat, bounds, w, float(k), -1 if top_n is None else int(top_n))
    return (ids, scores, ranks) if return_ranks else (ids, scores)
