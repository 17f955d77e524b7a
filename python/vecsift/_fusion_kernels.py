"""numba loop behind vecsift.rrf (imported on first use, like the BM25 kernels).

Fusing two lists of 100 ids is a few hundred additions; in numpy it took a
dozen calls (unique, add.at, lexsort, ...) and ~40 us, more than the BM25
search feeding it. One compiled pass does it in a few microseconds.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _group_order(ids):
    """Order of entries by (id, entry index): unique int64 keys sort faster than a stable sort."""
    m = ids.shape[0]
    if m == 0 or ids.max() < (1 << 62) // (m + 1):
        keys = ids * (m + 1) + np.arange(m)
        return np.argsort(keys)
    return np.argsort(ids, kind="mergesort")


@njit(cache=True, nogil=True)
def _better(s1, b1, i1, s2, b2, i2):
    return s1 > s2 or (s1 == s2 and (b1 < b2 or (b1 == b2 and i1 < i2)))


@njit(cache=True, nogil=True)
def fuse(flat, bounds, weights, k, top_n):
    """flat: the lists concatenated (ids, negative = padding), list i at bounds[i]:bounds[i+1].

    Returns (ids int64, scores float64, ranks int64 (m, lists)) best first: by
    fused score, then the better best rank, then the smaller id; at most top_n
    rows (top_n < 0: all). An id repeated within a list counts at its first
    position; contributions are summed in list order.
    """
    n_lists = bounds.shape[0] - 1
    # Valid entries with their list and 1-based rank, in list order.
    m = 0
    for j in range(flat.shape[0]):
        if flat[j] >= 0:
            m += 1
    ids_v = np.empty(m, np.int64)
    list_v = np.empty(m, np.int64)
    rank_v = np.empty(m, np.int64)
    m = 0
    for li in range(n_lists):
        for j in range(bounds[li], bounds[li + 1]):
            if flat[j] >= 0:
                ids_v[m], list_v[m], rank_v[m] = flat[j], li, j - bounds[li] + 1
                m += 1
    order = _group_order(ids_v)  # equal ids together, in list order, then position
    n_uniq = 0
    for j in range(m):
        if j == 0 or ids_v[order[j]] != ids_v[order[j - 1]]:
            n_uniq += 1
    ids = np.empty(n_uniq, np.int64)
    scores = np.zeros(n_uniq)
    best = np.empty(n_uniq, np.int64)
    ranks = np.zeros((n_uniq, n_lists), np.int64)
    g = -1
    for j in range(m):
        e = order[j]
        if j == 0 or ids_v[e] != ids_v[order[j - 1]]:
            g += 1
            ids[g] = ids_v[e]
            best[g] = rank_v[e]
        li = list_v[e]
        if ranks[g, li] != 0:
            continue  # a repeat within the same list
        r = rank_v[e]
        ranks[g, li] = r
        scores[g] += weights[li] / (k + r)
        if r < best[g]:
            best[g] = r
    if 0 <= top_n < n_uniq:
        final = _best_few(scores, best, ids, top_n)
    else:
        # Best first: sort by score, then put each run of equal scores in (best rank, id) order.
        final = np.argsort(-scores)
        for j in range(1, n_uniq):
            x = final[j]
            i = j - 1
            while i >= 0 and _better(scores[x], best[x], ids[x], scores[final[i]], best[final[i]], ids[final[i]]):
                final[i + 1] = final[i]
                i -= 1
            final[i + 1] = x
    return ids[final], scores[final], ranks[final]


@njit(cache=True, nogil=True)
def _best_few(scores, best, ids, n):
    """Indices of the n best groups, best first (insertion into a sorted list of n: top_n is small)."""
    out = np.empty(n, np.int64)
    if n == 0:
        return out
    have = 0
    for x in range(scores.shape[0]):
        if have == n and not _better(scores[x], best[x], ids[x], scores[out[n - 1]], best[out[n - 1]], ids[out[n - 1]]):
            continue
        i = have - 1 if have < n else n - 2
        while i >= 0 and _better(scores[x], best[x], ids[x], scores[out[i]], best[out[i]], ids[out[i]]):
            out[i + 1] = out[i]
            i -= 1
        out[i + 1] = x
        if have < n:
            have += 1
    return out
