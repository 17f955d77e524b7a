"""Retrieval quality metrics, averaged over queries.

`found` is what a search returned: a (q, n) int array of ids, best first
(-1 is padding, as every vecsift search pads), or a list of q sequences.

recall_at_k compares against exact search: `true_ids` is the exact top-k.
The others compare against judged relevance: `relevant` is a list of q
entries, each a dict {id: grade} (grade > 0 is relevant; graded relevance
for nDCG), a set/sequence of ids (all grade 1), or a single int id.

Every function returns the mean over queries (a float); per_query=True
returns the per-query values (float64 array) instead.
"""
from __future__ import annotations

import numpy as np


def _rows(found, k):
    """found as a list of q lists of at most k ids, padding dropped."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if isinstance(found, np.ndarray):
        if found.ndim != 2:
            raise ValueError(f"found must be 2-d (queries, ranks), got shape {found.shape}")
        found = found[:, :k].tolist()
    else:
        found = [list(np.asarray(r).ravel()[:k].tolist()) for r in found]
    return [[x for x in r if x >= 0] for r in found]


def _grades(relevant, nq):
    if isinstance(relevant, np.ndarray) and relevant.ndim == 1:
        relevant = relevant.tolist()
    relevant = list(relevant)
    if len(relevant) != nq:
        raise ValueError(f"relevant has {len(relevant)} entries for {nq} queries")
    out = []
    for r in relevant:
        if isinstance(r, dict):
            g = {int(i): float(v) for i, v in r.items() if v > 0}
        elif isinstance(r, (int, np.integer)):
            g = {int(r): 1.0}
        else:
            g = {int(i): 1.0 for i in r}
        out.append(g)
    return out


def _finish(values, per_query):
    v = np.asarray(values, dtype=np.float64)
    if per_query:
        return v
    return float(v.mean()) if v.size else 0.0


def recall_at_k(found, true_ids, k: int, per_query: bool = False):
    """|found[:k] ∩ true[:k]| / |true[:k]| (true padding -1 not counted)."""
    f = _rows(found, k)
    t = _rows(true_ids, k)
    if len(f) != len(t):
        raise ValueError(f"found has {len(f)} queries, true_ids has {len(t)}")
    vals = [len(set(a) & set(b)) / len(set(b)) if b else 1.0 for a, b in zip(f, t)]
    return _finish(vals, per_query)


def hit_at_k(found, relevant, k: int, per_query: bool = False):
    """1 if any relevant id is in the first k, else 0."""
    f = _rows(found, k)
    g = _grades(relevant, len(f))
    return _finish([float(any(x in gi for x in r)) for r, gi in zip(f, g)], per_query)


def mrr_at_k(found, relevant, k: int, per_query: bool = False):
    """1 / (1-based rank of the first relevant id within the first k), else 0."""
    f = _rows(found, k)
    g = _grades(relevant, len(f))
    vals = []
    for r, gi in zip(f, g):
        vals.append(next((1.0 / (i + 1) for i, x in enumerate(r) if x in gi), 0.0))
    return _finish(vals, per_query)


def ndcg_at_k(found, relevant, k: int, per_query: bool = False, gain: str = "linear"):
    """DCG@k / ideal DCG@k with DCG = sum_i gain(grade_i) / log2(i + 1), i 1-based.

    gain="linear" uses the grade itself (trec_eval, sklearn); "exponential"
    uses 2**grade - 1 (Burges et al.). An id counts once, at its first
    position. A query with no relevant id scores 0."""
    if gain not in ("linear", "exponential"):
        raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")
    f = _rows(found, k)
    g = _grades(relevant, len(f))

    def gv(x):
        return x if gain == "linear" else 2.0 ** x - 1.0

    vals = []
    for r, gi in zip(f, g):
        if not gi:
            vals.append(0.0)
            continue
        seen, dcg = set(), 0.0
        for i, x in enumerate(r):
            if x in gi and x not in seen:
                dcg += gv(gi[x]) / np.log2(i + 2)
            seen.add(x)
        ideal = sorted(gi.values(), reverse=True)[:k]
        idcg = sum(gv(v) / np.log2(i + 2) for i, v in enumerate(ideal))
        vals.append(dcg / idcg)
    return _finish(vals, per_query)
