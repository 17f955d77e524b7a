"""Two-stage list ranking for IVFIndex: a basis of the centroids' leading
principal directions, on which every list is scored first.

A query ranks all nlist centroids before it scans a list. At 10^7 rows
(nlist 8,192, 384-d) that reads 6.3 MB of float16 centroids per query, about
0.3 ms of a 2 ms budget, at the rate the shared cache delivers. Sentence
embeddings are anisotropic: on the 10M generated MiniLM rows, 160 of 384
directions hold 90% of the centroids' energy. Scored first on those
projections (0.42 of the bytes), then the best max(256, 4 nprobe) lists again
on their whole centroids, the first 128 lists chosen overlap the one-stage
choice 0.9999 (1,000 queries). The C++ core does the scoring
(index/partitioned_quant.hpp, rank_two_stage); this module finds the basis.

Only for cosine / ip indexes (the core scores their centroids in float16),
with at least MIN_NLIST lists, and only when the energy is concentrated
enough that r <= dim / 2: isotropic data keeps the one-stage ranking.
"""
from __future__ import annotations

import numpy as np

from vecsift import _core

MIN_NLIST = 1024  # below, ranking is a small share of a query
ENERGY = 0.90     # share of sum ||c||^2 the basis keeps
STEP = 16         # r is rounded up to a multiple of this (whole SIMD registers)


def rank_basis(centroids: np.ndarray, metric: str):
    """(basis (r, dim) float32, projections (nlist, r) float16 bits as uint16),
    or (None, None) when one-stage ranking is kept."""
    nlist, dim = centroids.shape
    if metric == "l2" or nlist < MIN_NLIST:
        return None, None
    c = np.asarray(centroids, dtype=np.float32)
    gram = (c.T @ c).astype(np.float64)  # uncentred: scores are raw inner products
    w, v = np.linalg.eigh(gram)
    w, v = w[::-1], v[:, ::-1]
    total = float(w.sum())
    if not np.isfinite(total) or total <= 0:
        return None, None
    r = int(np.searchsorted(np.cumsum(w) / total, ENERGY)) + 1
    r = min(dim, -(-r // STEP) * STEP)
    if 2 * r > dim:
        return None, None
    basis = np.ascontiguousarray(v[:, :r].T, dtype=np.float32)
    proj = _core.to_half(np.ascontiguousarray(c @ basis.T).ravel()).reshape(nlist, r)
    return basis, proj
