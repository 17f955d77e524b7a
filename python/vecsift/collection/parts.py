"""One unfiltered query over several collections' quantised indexes in two native calls.

A node actor of a sharded collection (vecsift.distributed) serves several shards,
each a Collection with its own bq index. Searched one after the other, each shard
pays its own Python path and four core calls (query check, scan, bound pruning,
rescoring), all with cold caches right after the Ray call. Here the query is
checked and normalised once, every shard's candidates come from one core call,
their row blocks are verified, and one more call rescores them exactly.

Per shard the result is exactly its own search's (Collection.search's fast path), so
the node's merge is unchanged. (Pruning all shards' candidates by one bound, as one
collection of all their rows does, read a third of the rows but saved ~10 us of a
~250 us node search and lowered recall: see quant_parts.hpp.)

Collection._search_part(k, ef, threads) describes a shard for this (a QuantPart,
or None whenever search() would not serve the call on its fast path, which the
caller then takes shard by shard).
"""
from __future__ import annotations

import numpy as np

from vecsift import _core
from vecsift.storage.rowsums import check_rows

_F32 = np.dtype(np.float32)


class QuantPart:
    """What one snapshot's bq fast path needs for a query with a given k (search.one_query makes it)."""

    __slots__ = ("core", "vectors", "candidates", "threads", "query_bits", "confidence", "metric", "cosine",
                 "lock", "dense", "n", "dim")

    def __init__(self, core, vectors, candidates, threads, query_bits, confidence, metric, cosine, lock, dense, n,
                 dim):
        self.core, self.vectors, self.candidates, self.threads = core, vectors, candidates, threads
        self.query_bits, self.confidence, self.metric, self.cosine = query_bits, confidence, metric, cosine
        self.lock, self.dense, self.n, self.dim = lock, dense, n, dim

    def key(self):
        """Parts searched in one call must agree on these."""
        return self.dim, self.query_bits, self.confidence, self.metric, self.cosine


def search_parts(vector, parts: list, k: int):
    """[(rows, scores)] per part (lists, best first, padded with -1 / -inf), what each part's own
    search would return for `vector`; None when the call is not for this route (a vector that is
    not one finite float32 row of the parts' dimension, parts that differ in their settings, an
    index being grown or replaced since the part was made): the caller then searches part by part,
    which raises whatever error applies."""
    first = parts[0]
    key = first.key()
    if type(vector) is not np.ndarray or (vector.dtype is not _F32 and vector.dtype != _F32) \
            or vector.shape != (first.dim,) or not vector.flags.c_contiguous \
            or any(p.key() != key for p in parts) or not _core.all_finite(vector):
        return None
    for p in parts:
        v = p.vectors
        if not isinstance(v, np.ndarray) or v.dtype != _F32 or v.ndim != 2 or not v.flags.c_contiguous:
            return None
    q = _core.unit_rows(vector.reshape(1, -1))[0] if first.cosine else vector
    held = []
    try:
        for p in parts:
            p.lock.acquire_read()
            held.append(p.lock)
            if p.dense.growing or p.dense.size != p.n:
                return None
        cand, kept = _core.quant_parts_candidates([p.core for p in parts], q, [p.candidates for p in parts],
                                                  [p.threads for p in parts], k, first.query_bits, first.confidence)
        for i, p in enumerate(parts):
            check_rows(p.vectors, cand[i:i + 1])  # block checksums of the rows about to be read
            p.dense.rescored = kept[i]
        ids, scores = _core.quant_parts_rescore([p.vectors for p in parts], q, cand, k, first.metric)
    finally:
        for lock in held:
            lock.release_read()
    return list(zip(ids.tolist(), scores.tolist()))
