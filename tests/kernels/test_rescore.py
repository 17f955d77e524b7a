"""_core.rescore (exact top-k among each query's candidates) and _core.bound_prune against numpy."""
import numpy as np
import pytest

from vecsift import _core


def reference(rows, queries, cand, k, metric):
    """Best k of each query's candidates (-1 = none) by exact float64 similarity, ties to the smaller row."""
    out_r = np.full((len(queries), k), -1, np.int64)
    out_s = np.full((len(queries), k), -np.inf, np.float64)
    for i, (q, c) in enumerate(zip(queries.astype(np.float64), cand)):
        c = c[c >= 0]
        x = rows[c].astype(np.float64)
        if metric == "l2":
            s = -((x - q) ** 2).sum(1)
        else:
            s = x @ q
            if metric == "cosine":
                nr = np.linalg.norm(x, axis=1) * np.linalg.norm(q)
                s = np.divide(s, nr, out=np.zeros_like(s), where=nr > 0)
        order = np.lexsort((c, -s))[:k]
        out_r[i, :len(order)], out_s[i, :len(order)] = c[order], s[order]
    return out_r, out_s


def candidates(rng, n, nq, c, missing=0.2):
    cand = np.stack([rng.choice(n, c, replace=False) for _ in range(nq)]).astype(np.int64)
    cand[rng.random(cand.shape) < missing] = -1
    return cand


@pytest.mark.parametrize("metric", ["ip", "l2", "cosine"])
@pytest.mark.parametrize("d", [5, 64, 384])
def test_rescore_matches_numpy(level, rng, metric, d):
    rows = rng.standard_normal((500, d)).astype(np.float32) * rng.uniform(0.1, 3, (500, 1)).astype(np.float32)
    queries = rng.standard_normal((37, d)).astype(np.float32)
    cand = candidates(rng, len(rows), len(queries), 40)
    rows[cand[cand >= 0][0]] = 0  # a zero candidate row: 0 under cosine
    got_r, got_s = _core.rescore(rows, queries, cand, 10, metric, 1, level)
    ref_r, ref_s = reference(rows, queries, cand, 10, metric)
    # The same rows unless two exact scores sit within rounding of each other; compare the scores
    # of what came back, and the rows wherever the reference's gap to the next score is clear.
    np.testing.assert_allclose(got_s, ref_s.astype(np.float32), rtol=1e-5, atol=1e-4 * d ** 0.5)
    clear = np.abs(np.diff(ref_s, axis=1, append=-np.inf)) > 1e-3
    assert (got_r[clear] == ref_r[clear]).all()


def test_rescore_exact_on_integer_data_with_ties(level, rng):
    # Integer rows: every level's sums are exact, so rows and scores equal the reference bit for bit,
    # and many scores tie: the smaller row must win each tie.
    rows = rng.integers(-2, 3, (300, 16)).astype(np.float32)
    queries = rng.integers(-2, 3, (20, 16)).astype(np.float32)
    cand = candidates(rng, len(rows), len(queries), 60)
    for metric in ("ip", "l2"):
        got_r, got_s = _core.rescore(rows, queries, cand, 15, metric, 1, level)
        ref_r, ref_s = reference(rows, queries, cand, 15, metric)
        np.testing.assert_array_equal(got_r, ref_r)
        np.testing.assert_array_equal(got_s, ref_s.astype(np.float32))


def test_rescore_pads_missing_and_threads_agree(rng):
    rows = rng.standard_normal((100, 32)).astype(np.float32)
    queries = rng.standard_normal((200, 32)).astype(np.float32)
    cand = candidates(rng, len(rows), len(queries), 8, missing=0.5)
    cand[0] = -1  # a query with no candidate at all
    r1, s1 = _core.rescore(rows, queries, cand, 12, "ip", 1)
    r2, s2 = _core.rescore(rows, queries, cand, 12, "ip", 2)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(s1, s2)
    assert (r1[0] == -1).all() and np.isneginf(s1[0]).all()
    kept = (cand >= 0).sum(1)
    assert ((r1 >= 0).sum(1) == kept).all()  # k > candidates: the rest is padding
    assert np.isneginf(s1[r1 < 0]).all()


def test_rescore_rejects_bad_input(rng):
    rows = rng.standard_normal((10, 8)).astype(np.float32)
    q = rng.standard_normal((2, 8)).astype(np.float32)
    ok = np.zeros((2, 3), np.int64)
    with pytest.raises(ValueError, match="below the 10 rows"):
        _core.rescore(rows, q, np.array([[0, 10, 1], [0, 1, 2]]), 2, "ip")
    with pytest.raises(ValueError, match="dimension"):
        _core.rescore(rows, q[:, :4].copy(), ok, 2, "ip")
    with pytest.raises(ValueError, match="2 queries"):
        _core.rescore(rows, q, ok[:1], 2, "ip")
    with pytest.raises(ValueError, match="k must be positive"):
        _core.rescore(rows, q, ok, 0, "ip")
    with pytest.raises(ValueError, match="metric"):
        _core.rescore(rows, q, ok, 2, "hamming")
    bad = rows.copy()
    bad[1, 3] = np.nan
    for metric in ("ip", "l2", "cosine"):
        with pytest.raises(ValueError, match="NaN or infinite"):
            _core.rescore(bad, q, np.array([[0, 1, -1], [2, 3, 4]]), 2, metric)
    bad[1, 3] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        _core.rescore(bad, q, np.array([[0, 1, -1], [2, 3, 4]]), 2, "ip", 2)
    _core.rescore(bad, q, np.array([[0, 2, -1], [2, 3, 4]]), 2, "ip")  # the bad row is not a candidate


def test_bound_prune_matches_numpy(rng):
    nq, c, k = 50, 40, 10
    cand = candidates(rng, 1000, nq, c, missing=0.1)
    est = rng.standard_normal((nq, c)).astype(np.float32)
    half = rng.random((nq, c)).astype(np.float32) * 0.5
    lo, hi = est - half, est + half
    lo[cand < 0] = hi[cand < 0] = -np.inf
    kth = np.sort(lo, axis=1)[:, ::-1][:, k - 1:k]
    want = np.where(hi >= kth, cand, -1)
    got = cand.copy()
    kept = _core.bound_prune(got, lo, hi, k)
    np.testing.assert_array_equal(got, want)
    assert kept == (want >= 0).sum()
    # Fewer than k candidates with finite bounds: nothing is dropped.
    few = cand.copy()
    few[:, 5:] = -1
    lo2, hi2 = lo.copy(), hi.copy()
    lo2[:, 5:] = hi2[:, 5:] = -np.inf
    before = few.copy()
    assert _core.bound_prune(few, lo2, hi2, k) == (before >= 0).sum()
    np.testing.assert_array_equal(few, before)
    with pytest.raises(ValueError, match="shape"):
        _core.bound_prune(cand.copy(), lo[:, :5].copy(), hi, k)
