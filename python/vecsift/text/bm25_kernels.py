"""numba loops behind BM25Index (imported on first use, so `import vecsift` stays fast).

Postings are CSR by term: ptr[t]..ptr[t+1] index docs (int32 rows, ascending)
and tfs (int32). Every kernel trusts its arrays: BM25Index validates what it
loads from disk before any of them runs, since numba does no bounds checks.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def build_csr(tids, doc_ptr, rows, vocab_size):
    """Postings of one batch. tids: term id of every token, doc by doc;
    doc_ptr[i]..doc_ptr[i+1] are the tokens of document rows[i].
    Returns (ptr int64[V+1], docs int32, tfs int32, doclen int32 per document)."""
    ndocs = rows.shape[0]
    mark = np.full(vocab_size, -1, np.int64)
    count = np.zeros(vocab_size + 1, np.int64)
    for i in range(ndocs):
        for j in range(doc_ptr[i], doc_ptr[i + 1]):
            t = tids[j]
            if mark[t] != i:
                mark[t] = i
                count[t + 1] += 1
    ptr = np.cumsum(count)
    nnz = ptr[vocab_size]
    docs = np.empty(nnz, np.int32)
    tfs = np.zeros(nnz, np.int32)
    fill = ptr[:vocab_size].copy()
    slot = np.empty(vocab_size, np.int64)
    mark[:] = -1
    doclen = np.empty(ndocs, np.int32)
    for i in range(ndocs):
        doclen[i] = doc_ptr[i + 1] - doc_ptr[i]
        for j in range(doc_ptr[i], doc_ptr[i + 1]):
            t = tids[j]
            if mark[t] != i:
                mark[t] = i
                s = fill[t]
                fill[t] = s + 1
                slot[t] = s
                docs[s] = rows[i]
            tfs[slot[t]] += 1
    return ptr, docs, tfs, doclen


@njit(cache=True, nogil=True)
def merge_csr(a_ptr, a_docs, a_tfs, b_ptr, b_docs, b_tfs, vocab_size, keep):
    """One CSR from two whose rows ascend within each term (the result's do too),
    dropping postings whose row has keep[row] == 0. Either ptr may be shorter
    than vocab_size + 1 (terms that segment has never seen)."""
    ptr = np.zeros(vocab_size + 1, np.int64)
    na = a_ptr.shape[0] - 1
    nb = b_ptr.shape[0] - 1
    for t in range(vocab_size):
        c = 0
        if t < na:
            for j in range(a_ptr[t], a_ptr[t + 1]):
                c += keep[a_docs[j]]
        if t < nb:
            for j in range(b_ptr[t], b_ptr[t + 1]):
                c += keep[b_docs[j]]
        ptr[t + 1] = ptr[t] + c
    docs = np.empty(ptr[vocab_size], np.int32)
    tfs = np.empty(ptr[vocab_size], np.int32)
    for t in range(vocab_size):
        o = ptr[t]
        i, ie = (a_ptr[t], a_ptr[t + 1]) if t < na else (0, 0)
        j, je = (b_ptr[t], b_ptr[t + 1]) if t < nb else (0, 0)
        while i < ie or j < je:
            if j >= je or (i < ie and a_docs[i] <= b_docs[j]):
                d, f = a_docs[i], a_tfs[i]
                i += 1
            else:
                d, f = b_docs[j], b_tfs[j]
                j += 1
            if keep[d]:
                docs[o] = d
                tfs[o] = f
                o += 1
    return ptr, docs, tfs


@njit(cache=True, nogil=True)
def live_df(ptr, docs, alive, out):
    """out[t] += number of alive rows in term t's postings."""
    n = min(ptr.shape[0] - 1, out.shape[0])
    for t in range(n):
        c = 0
        for j in range(ptr[t], ptr[t + 1]):
            c += alive[docs[j]]
        out[t] += c


@njit(cache=True, nogil=True)
def kept_df(a_ptr, a_docs, b_ptr, b_docs, tids, keep):
    """Per term of tids: how many of its rows (both segments) have keep[row] != 0."""
    out = np.zeros(tids.shape[0], np.int64)
    for i in range(tids.shape[0]):
        t = tids[i]
        c = 0
        if t < a_ptr.shape[0] - 1:
            for j in range(a_ptr[t], a_ptr[t + 1]):
                c += keep[a_docs[j]] != 0
        if t < b_ptr.shape[0] - 1:
            for j in range(b_ptr[t], b_ptr[t + 1]):
                c += keep[b_docs[j]] != 0
        out[i] = c
    return out


@njit(cache=True, nogil=True)
def _accumulate(ptr, docs, tfs, t, w, dl, c0, c1, keep, acc, touched, nt):
    if t >= ptr.shape[0] - 1:
        return nt
    for j in range(ptr[t], ptr[t + 1]):
        d = docs[j]
        if keep[d]:
            tf = tfs[j]
            if acc[d] == 0.0:
                touched[nt] = d
                nt += 1
            acc[d] += w * tf / (tf + c0 + c1 * dl[d])
    return nt


@njit(cache=True, nogil=True)
def _lookup(ptr, docs, tfs, t, d):
    """tf of row d in term t's postings (rows ascend), 0 if absent."""
    if t >= ptr.shape[0] - 1:
        return 0
    lo, hi = ptr[t], ptr[t + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if docs[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    if lo < ptr[t + 1] and docs[lo] == d:
        return tfs[lo]
    return 0


@njit(cache=True, nogil=True)
def _worse(s1, r1, s2, r2):
    return s1 < s2 or (s1 == s2 and r1 > r2)


@njit(cache=True, nogil=True)
def _sift_down(hs, hr, i, n):
    # Min-heap on (score, -row): the root is the worst kept hit.
    while True:
        l = 2 * i + 1
        if l >= n:
            return
        c = l
        r = l + 1
        if r < n and _worse(hs[r], hr[r], hs[l], hr[l]):
            c = r
        if _worse(hs[c], hr[c], hs[i], hr[i]):
            hs[c], hs[i] = hs[i], hs[c]
            hr[c], hr[i] = hr[i], hr[c]
            i = c
        else:
            return


@njit(cache=True, nogil=True)
def _heap_push(hs, hr, n, m, s, d):
    """Offers (s, d) to a bounded min-heap of capacity m holding n; returns new n."""
    if n < m:
        j = n
        hs[j] = s
        hr[j] = d
        n += 1
        while j > 0:
            p = (j - 1) // 2
            if _worse(hs[j], hr[j], hs[p], hr[p]):
                hs[j], hs[p] = hs[p], hs[j]
                hr[j], hr[p] = hr[p], hr[j]
                j = p
            else:
                break
    elif _worse(hs[0], hr[0], s, d):
        hs[0] = s
        hr[0] = d
        _sift_down(hs, hr, 0, n)
    return n


@njit(cache=True, nogil=True)
def _kth_score(acc, touched, nt, k):
    """The k-th best score among the touched rows (nt >= k)."""
    hs = np.empty(k, np.float64)
    hr = np.empty(k, np.int64)
    n = 0
    for i in range(nt):
        d = touched[i]
        s = acc[d]
        # inline test first: most rows lose to the root (keeps the loop tight)
        if n < k or s > hs[0] or (s == hs[0] and d < hr[0]):
            n = _heap_push(hs, hr, n, k, s, d)
    return hs[0]


@njit(cache=True, nogil=True)
def _prune(acc, touched, nt, k, bound):
    """Keeps (in touched[:returned]) the rows whose score + bound beats the k-th
    best score; the others are zeroed in acc. Returns the new count."""
    theta = _kth_score(acc, touched, nt, k) if nt >= k else -1.0
    o = 0
    for c in range(nt):
        d = touched[c]
        if acc[d] + bound > theta:
            touched[o] = d
            o += 1
        else:
            acc[d] = 0.0
    return o


@njit(cache=True, nogil=True)
def _finish_candidates(a_ptr, a_docs, a_tfs, b_ptr, b_docs, b_tfs, tids, weights, dl, c0, c1, k,
                       acc, touched, nt, i, rem, theta):
    """Terms i.. for the rows seen so far only, dropping rows that can no longer
    reach the top k after each term. A row is a candidate while acc[row] != 0."""
    nc = 0
    for c in range(nt):  # the first cut uses the theta already computed
        d = touched[c]
        if acc[d] + rem[i] > theta:
            touched[nc] = d
            nc += 1
        else:
            acc[d] = 0.0
    for j in range(i, tids.shape[0]):
        t = tids[j]
        w = weights[j]
        for ptr, docs, tfs in ((a_ptr, a_docs, a_tfs), (b_ptr, b_docs, b_tfs)):
            if t >= ptr.shape[0] - 1:
                continue
            length = ptr[t + 1] - ptr[t]
            if nc * 16 < length:  # few candidates: binary search each
                for c in range(nc):
                    d = touched[c]
                    tf = _lookup(ptr, docs, tfs, t, d)
                    if tf > 0:
                        acc[d] += w * tf / (tf + c0 + c1 * dl[d])
            else:  # many: one pass over the list, touching candidates only
                for jj in range(ptr[t], ptr[t + 1]):
                    d = docs[jj]
                    if acc[d] != 0.0:
                        tf = tfs[jj]
                        acc[d] += w * tf / (tf + c0 + c1 * dl[d])
        if j + 1 < tids.shape[0]:
            nc = _prune(acc, touched, nc, k, rem[j + 1])
    return nc


@njit(cache=True, nogil=True)
def score_topk(a_ptr, a_docs, a_tfs, b_ptr, b_docs, b_tfs, tids, weights, dl, c0, c1, keep, k,
               acc, touched, prune_min):
    """Exact BM25 top-k of one query over two segments.

    tids / weights: the query's term ids and weights (idf times query count),
    heaviest first. Row d's length norm k1 * (1 - b + b * dl[d] / avgdl) is
    c0 + c1 * dl[d] (c0 = k1 (1 - b), c1 = k1 b / avgdl), so statistics of a
    subset (another avgdl) need no per-row array. acc (float64) and
    touched (int64) are scratch with one entry per row; acc must be all zero
    on entry and is all zero again on return.

    Term at a time with Moffat-Zobel style early termination: a term adds less
    than its weight to any row (tf / (tf + norm) <= 1), so once the weights of
    the terms still to come sum to at most the current k-th best score, no row
    not yet seen can enter the top k. From then on only the rows that still can
    (score + remaining weight > k-th best) are finished, by binary search in
    the remaining posting lists. The result equals a full evaluation. The
    check (a k-selection over the rows seen) runs only before a posting list
    of at least prune_min postings, where skipping it pays.
    Returns (rows int64, scores float32), best first, ties by smaller row."""
    m = tids.shape[0]
    rem = np.zeros(m + 1, np.float64)
    for i in range(m - 1, -1, -1):
        rem[i] = rem[i + 1] + weights[i]
    nt = 0
    i = 0
    theta = -1.0
    while i < m:
        t = tids[i]
        if nt >= k and i > 0:
            length = 0
            if t < a_ptr.shape[0] - 1:
                length += a_ptr[t + 1] - a_ptr[t]
            if t < b_ptr.shape[0] - 1:
                length += b_ptr[t + 1] - b_ptr[t]
            if length >= prune_min:
                theta = _kth_score(acc, touched, nt, k)
                if rem[i] <= theta:
                    break
        nt = _accumulate(a_ptr, a_docs, a_tfs, t, weights[i], dl, c0, c1, keep, acc, touched, nt)
        nt = _accumulate(b_ptr, b_docs, b_tfs, t, weights[i], dl, c0, c1, keep, acc, touched, nt)
        i += 1
    mk = min(k, nt)
    hs = np.empty(mk, np.float64)
    hr = np.empty(mk, np.int64)
    n = 0
    if i < m:
        nt = _finish_candidates(a_ptr, a_docs, a_tfs, b_ptr, b_docs, b_tfs, tids, weights,
                                dl, c0, c1, k, acc, touched, nt, i, rem, theta)
    for c in range(nt):
        d = touched[c]
        s = acc[d]
        acc[d] = 0.0
        if n < mk or s > hs[0] or (s == hs[0] and d < hr[0]):
            n = _heap_push(hs, hr, n, mk, s, d)
    out_r = np.empty(n, np.int64)
    out_s = np.empty(n, np.float32)
    while n > 0:  # pop worst first, fill from the back
        out_r[n - 1] = hr[0]
        out_s[n - 1] = hs[0]
        n -= 1
        hs[0] = hs[n]
        hr[0] = hr[n]
        _sift_down(hs, hr, 0, n)
    return out_r, out_s
