"""IVFIndex over sign-bit codes (scorer="sign", format 1): recall against exact
search, exactness when every list is probed, filters that keep recall, adds,
and bad input. The RaBitQ-code variant: test_partitioned_quant.py."""
import numpy as np
import pytest

import vecsift
from vecsift import IVFIndex
from vecsift.eval import recall_at_k

DIM = 96


def clustered(n, nq, dim=DIM, centres=40, spread=0.35, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    q = c[rng.integers(0, centres, nq)] + spread * rng.standard_normal((nq, dim)).astype(np.float32)
    return np.ascontiguousarray(x, np.float32), np.ascontiguousarray(q, np.float32)


@pytest.fixture(scope="module")
def data():
    x, q = clustered(12_000, 100, centres=200, spread=1.0)
    return x, q, IVFIndex.build(x, nlist=64, scorer="sign")


def hamming_all(x, q):
    cx = np.unpackbits(vecsift.binary_quantize(x), axis=1, bitorder="little").astype(np.int32)
    cq = np.unpackbits(vecsift.binary_quantize(q), axis=1, bitorder="little").astype(np.int32)
    return cq @ (1 - cx).T + (1 - cq) @ cx.T


def test_recall_against_exact(data):
    x, q, ix = data
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    ids, scores = ix.search(q, 10, nprobe=16, oversample=32)
    assert recall_at_k(ids, gt, 10) >= 0.95
    # Scores are the exact cosine similarities of the returned rows, best first.
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    ref = np.einsum("qd,qkd->qk", qn, xn[ids])
    np.testing.assert_allclose(scores, ref, atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-7).all()
    # One list misses neighbours that more lists find.
    assert recall_at_k(ix.search(q, 10, nprobe=1, oversample=32)[0], gt, 10) < recall_at_k(ids, gt, 10)


def test_all_lists_and_all_candidates_is_exact(data):
    x, q, ix = data
    for metric in ("cosine", "ip", "l2"):
        m = IVFIndex(DIM, 32, metric, scorer="sign").train(x[:4000])
        m.add(x[:4000])
        ids, scores = m.search(q, 10, nprobe=32, oversample=4000)
        gi, gs = vecsift.exact_search(x[:4000], q, 10, metric)
        np.testing.assert_array_equal(ids, gi)
        np.testing.assert_allclose(scores, gs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("refine", [1, 3])
def test_all_lists_equals_exact_over_codes(refine):
    """nprobe = nlist ranks every row by Hamming like a flat code scan: the
    result equals a numpy reference of the cascade (flat Hamming top
    k*oversample*refine, re-ranked by <q, 2b-1> to k*oversample, rescored),
    on queries whose cut-off Hamming distance is not tied (there the
    candidate set is unique)."""
    x, q = clustered(6000, 100, dim=256, centres=100, spread=1.0, seed=5)
    ix = IVFIndex.build(x, nlist=32, scorer="sign")
    k, os_ = 10, 2
    wide = k * os_ * refine
    ids, scores = ix.search(q, k, nprobe=ix.nlist, oversample=os_, refine=refine)
    h = hamming_all(x, q)
    signs = np.unpackbits(vecsift.binary_quantize(x), axis=1, bitorder="little").astype(np.float64) * 2 - 1
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    checked = 0
    for i in range(len(q)):
        order = np.argsort(h[i], kind="stable")
        cut = h[i][order[wide - 1]]
        if (h[i] <= cut).sum() != wide:
            continue
        cand = order[:wide]
        if refine > 1:
            est = signs[cand] @ qn[i].astype(np.float64)
            cand = cand[np.argsort(-est, kind="stable")[:k * os_]]
        s = xn[cand] @ qn[i]
        ref = cand[np.lexsort((cand, -s))][:k]
        np.testing.assert_array_equal(ids[i], ref)
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("exact_small", [False, True])
@pytest.mark.parametrize("selectivity", [0.01, 0.1])
def test_filters_keep_recall_and_return_k_rows(data, selectivity, exact_small):
    x, q, ix = data
    allow = np.random.default_rng(3).random(len(x)) < selectivity
    gt, _ = vecsift.exact_search(x, q, 10, "cosine", allow=allow)
    ids, _, st = ix.search(q, 10, nprobe=4, allow=allow, exact_small=exact_small, return_stats=True)
    assert (ids >= 0).all()
    assert allow[ids].all()
    # Recall of the allowed top-k is no worse than the unfiltered search's.
    unfiltered = recall_at_k(ix.search(q, 10, nprobe=4)[0], vecsift.exact_search(x, q, 10, "cosine")[0], 10)
    assert recall_at_k(ids, gt, 10) >= min(0.99, unfiltered - 0.03)
    if selectivity == 0.01:
        assert recall_at_k(ids, gt, 10) >= 0.99
    if not exact_small:
        assert st["exact"] == 0
        # The 1% case cannot find 160 allowed rows in 4 lists: probing went further.
        if selectivity == 0.01:
            assert st["lists"] > 4 * len(q)


def test_allow_forms_and_fewer_than_k_allowed(data):
    x, q, ix = data
    from pyroaring import BitMap
    few = [5, 77, 900]
    for allow in (few, np.array(few), BitMap(few)):
        for exact_small in (True, False):
            ids, scores = ix.search(q[:3], 10, allow=allow, exact_small=exact_small)
            assert sorted(ids[0, :3].tolist()) == few
            assert (ids[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    ids, _ = ix.search(q[:2], 5, allow=np.zeros(len(x), bool))
    assert (ids == -1).all()


def test_incremental_add_equals_one_add(data):
    x, q, _ = data
    a = IVFIndex(DIM, 32, scorer="sign").train(x)
    b = IVFIndex(DIM, 32, scorer="sign").train(x)
    a.add(x)
    for s in range(0, len(x), 5000):
        b.add(x[s:s + 5000])
    assert len(a) == len(b) == len(x)
    np.testing.assert_array_equal(a.list_sizes(), b.list_sizes())
    ia, sa = a.search(q, 10, nprobe=8)
    ib, sb = b.search(q, 10, nprobe=8)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(sa, sb)
    # Adds go to the nearest list.
    assign = vecsift.index.kmeans.assign(x[:50], a.centroids, "cosine")
    for r, lst in enumerate(assign[:5]):
        ids, _ = a.search(x[r], 1, nprobe=1, oversample=10_000)
        assert ids[0, 0] == r


def test_retrain_reassigns_rows(data):
    x, q, _ = data
    ix = IVFIndex(DIM, 16, scorer="sign").train(x[:2000])
    ix.add(x[:6000])
    ix.train(x, nlist=48)
    assert ix.nlist == 48 and len(ix) == 6000 and ix.list_sizes().sum() == 6000
    gt, _ = vecsift.exact_search(x[:6000], q, 10, "cosine")
    assert recall_at_k(ix.search(q, 10, nprobe=12, oversample=32)[0], gt, 10) >= 0.9


def test_kmeans_balance_and_no_empty_lists():
    x, _ = clustered(8000, 1, centres=8)
    ix = IVFIndex.build(x, nlist=64, scorer="sign")
    b = ix.balance()
    assert b["lists"] == 64 and b["empty"] == 0 and b["min"] > 0
    assert b["imbalance"] < 2.0
    assert ix.list_sizes().sum() == len(x)


def test_threads_give_identical_results(data):
    x, q, ix = data
    a = ix.search(q, 10, threads=1)
    b = ix.search(q, 10, threads=2)
    np.testing.assert_array_equal(a[0], b[0])
    c = np.stack([ix.search(qi, 10, threads=1)[0][0] for qi in q[:10]])
    np.testing.assert_array_equal(a[0][:10], c)


def test_bad_input(data):
    x, q, ix = data
    with pytest.raises(ValueError, match="queries"):
        ix.search(np.ones((2, DIM + 1), np.float32), 10)
    bad = q[:2].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ix.search(bad, 10)
    with pytest.raises(ValueError, match="k must be positive"):
        ix.search(q, 0)
    with pytest.raises(ValueError, match="nprobe"):
        ix.search(q, 10, nprobe=0)
    with pytest.raises(ValueError, match="oversample"):
        ix.search(q, 10, oversample=-1)
    with pytest.raises(ValueError, match="refine"):
        ix.search(q, 10, refine=0)
    with pytest.raises(ValueError, match="min_candidates"):
        ix.search(q, 10, min_candidates=-3)
    with pytest.raises(ValueError, match="allow"):
        ix.search(q, 10, allow=np.ones(5, bool))
    with pytest.raises(ValueError, match="allow"):
        ix.search(q, 10, allow=[len(x)])
    with pytest.raises(ValueError, match="metric"):
        IVFIndex(DIM, 8, "hamming")
    with pytest.raises(ValueError, match="dim"):
        IVFIndex(0)
    with pytest.raises(ValueError, match="nlist"):
        IVFIndex(DIM, 0)
    with pytest.raises(ValueError, match="scorer"):
        IVFIndex(DIM, 8, scorer="pq")
    with pytest.raises(ValueError, match="nlist"):
        IVFIndex(DIM, 100).train(x[:50])
    with pytest.raises(ValueError, match="vectors"):
        ix.add(np.ones((3, DIM - 1), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        ix.add(np.full((3, DIM), np.nan, np.float32))
    with pytest.raises(RuntimeError, match="not trained"):
        IVFIndex(DIM, 8).add(x[:10])
    empty = IVFIndex(DIM, 8).train(x[:100])
    ids, _ = empty.search(q[:2], 3)
    assert (ids == -1).all()
