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
    """One CSR from two (every row of b after every row of a within a term, as
    rows of b are newer), dropping postings whose row has keep[row] == 0.
    Either ptr may be shorter than vocab_size + 1 (terms it has never seen)."""
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
        if t < na:
            for j in range(a_ptr[t], a_ptr[t + 1]):
                if keep[a_docs[j]]:
                    docs[o] = a_docs[j]
                    tfs[o] = a_tfs[j]
                    o += 1
        if t < nb:
            for j in range(b_ptr[t], b_ptr[t + 1]):
                if keep[b_docs[j]]:
                    docs[o] = b_docs[j]
                    tfs[o] = b_tfs[j]
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
def _accumulate(ptr, docs, tfs, tids, weights, norm, keep, acc, touched, nt):
    nterms = ptr.shape[0] - 1
    for q in range(tids.shape[0]):
        t = tids[q]
        if t >= nterms:
            continue
        w = weights[q]
        for j in range(ptr[t], ptr[t + 1]):
            d = docs[j]
            if keep[d]:
                tf = tfs[j]
                if acc[d] == 0.0:
                    touched[nt] = d
                    nt += 1
                acc[d] += w * tf / (tf + norm[d])
    return nt


@njit(cache=True, nogil=True)
def _sift_down(hs, hr, i, n):
    # Min-heap on (score, -row): the root is the worst kept hit.
    while True:
        l = 2 * i + 1
        if l >= n:
            return
        c = l
        r = l + 1
        if r < n and (hs[r] < hs[l] or (hs[r] == hs[l] and hr[r] > hr[l])):
            c = r
        if hs[c] < hs[i] or (hs[c] == hs[i] and hr[c] > hr[i]):
            hs[c], hs[i] = hs[i], hs[c]
            hr[c], hr[i] = hr[i], hr[c]
            i = c
        else:
            return


@njit(cache=True, nogil=True)
def score_topk(a_ptr, a_docs, a_tfs, b_ptr, b_docs, b_tfs, tids, weights, norm, keep, k,
               acc, touched):
    """BM25 top-k of one query over two segments.

    weights[q] = idf of query term tids[q]; norm[d] = k1 * (1 - b + b * dl / avgdl).
    acc (float64) and touched (int64) are scratch of one entry per row; acc must
    be all zero on entry and is all zero again on return.
    Returns (rows int64, scores float32), best first, ties by smaller row."""
    nt = _accumulate(a_ptr, a_docs, a_tfs, tids, weights, norm, keep, acc, touched, 0)
    nt = _accumulate(b_ptr, b_docs, b_tfs, tids, weights, norm, keep, acc, touched, nt)
    m = min(k, nt)
    hs = np.empty(m, np.float64)
    hr = np.empty(m, np.int64)
    n = 0
    for i in range(nt):
        d = touched[i]
        s = acc[d]
        acc[d] = 0.0
        if n < m:
            # insert at the end, sift up
            j = n
            hs[j] = s
            hr[j] = d
            n += 1
            while j > 0:
                p = (j - 1) // 2
                if hs[j] < hs[p] or (hs[j] == hs[p] and hr[j] > hr[p]):
                    hs[j], hs[p] = hs[p], hs[j]
                    hr[j], hr[p] = hr[p], hr[j]
                    j = p
                else:
                    break
        elif s > hs[0] or (s == hs[0] and d < hr[0]):
            hs[0] = s
            hr[0] = d
            _sift_down(hs, hr, 0, n)
    out_r = np.empty(m, np.int64)
    out_s = np.empty(m, np.float32)
    # pop worst first, fill from the back
    while n > 0:
        out_r[n - 1] = hr[0]
        out_s[n - 1] = hs[0]
        n -= 1
        hs[0] = hs[n]
        hr[0] = hr[n]
        _sift_down(hs, hr, 0, n)
    return out_r, out_s
