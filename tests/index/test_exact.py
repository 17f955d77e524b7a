import numpy as np
import pytest
from pyroaring import BitMap

import vecsift
from vecsift import _core

from conftest import DIMS, topk_ref


def similarity_ref(base, queries, metric):
    b, q = base.astype(np.float64), queries.astype(np.float64)
    if metric == "ip":
        return q @ b.T
    if metric == "l2":
        return -((q[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    bn = np.linalg.norm(b, axis=1)
    qn = np.linalg.norm(q, axis=1)
    return (q @ b.T) / np.maximum(qn[:, None] * bn[None, :], 1e-300)


@pytest.mark.parametrize("nq", [1, 2, 13])  # 1-2 queries score rows directly, more use panels
@pytest.mark.parametrize("metric", ["ip", "l2", "cosine"])
@pytest.mark.parametrize("d", DIMS)
def test_exact_search_matches_numpy(level, rng, metric, d, nq):
    base = rng.standard_normal((777, d)).astype(np.float32)
    queries = rng.standard_normal((nq, d)).astype(np.float32)
    k = 10
    ref = similarity_ref(base, queries, metric)
    for threads in (1, 2):
        ids, scores = _core.exact_search(base, queries, k, metric, None, None, threads, level)
        # Scores of the returned rows equal the reference for those rows...
        np.testing.assert_allclose(scores, np.take_along_axis(ref, ids, 1), rtol=2e-4, atol=2e-4 * max(1, d) ** 0.5)
        # ...and are the true top-k scores (ids may differ only among near-equal scores).
        true_top = -np.sort(-ref, axis=1)[:, :k]
        np.testing.assert_allclose(scores, true_top, rtol=2e-4, atol=2e-4 * max(1, d) ** 0.5)
        assert (np.diff(scores, axis=1) <= 0).all()


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_exact_ties_broken_by_smaller_id(level, rng, metric):
    # Integer data: every score is exact, so the order must equal numpy's
    # stable argsort (score descending, then id ascending) exactly.
    base = rng.integers(-2, 3, (3000, 12)).astype(np.float32)
    queries = rng.integers(-2, 3, (25, 12)).astype(np.float32)
    ref = similarity_ref(base, queries, metric)
    ref_ids, ref_keys = topk_ref(-ref, 40)
    for threads in (1, 2):
        ids, scores = _core.exact_search(base, queries, 40, metric, None, None, threads, level)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(scores, -ref_keys)
        ids, scores = _core.exact_search(base, queries[:2], 40, metric, None, None, threads, level)
        np.testing.assert_array_equal(ids, ref_ids[:2])
        np.testing.assert_array_equal(scores, -ref_keys[:2])


def test_public_exact_search_defaults_and_padding(rng):
    base = rng.standard_normal((5, 8)).astype(np.float32)
    ids, scores = vecsift.exact_search(base, base[0], 8)
    assert ids.shape == (1, 8) and ids.dtype == np.int64 and scores.dtype == np.float32
    assert sorted(ids[0, :5].tolist()) == list(range(5))
    assert (ids[0, 5:] == -1).all() and np.isneginf(scores[0, 5:]).all()
    ids, scores = vecsift.exact_search(base, base[2], 1, metric="l2")
    assert ids[0, 0] == 2 and abs(scores[0, 0]) < 1e-5  # l2 score is -squared distance


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_exact_search_allow(rng, density, level):
    n = 4000
    base = rng.standard_normal((n, 40)).astype(np.float32)
    queries = rng.standard_normal((7, 40)).astype(np.float32)
    mask = rng.random(n) < density
    allowed = np.flatnonzero(mask)
    ref = similarity_ref(base, queries, "ip")
    ref[:, ~mask] = -np.inf
    for allow in (mask, allowed, BitMap(allowed.tolist())):
        from vecsift.allow import allow_arrays
        m, i = allow_arrays(allow, n)
        ids, scores = _core.exact_search(base, queries, 10, "ip", m, i, 0, level)
        found = min(10, allowed.size)
        assert np.isin(ids[:, :found], allowed).all()
        assert (ids[:, found:] == -1).all()
        np.testing.assert_allclose(scores[:, :found], -np.sort(-ref, axis=1)[:, :found], rtol=1e-4, atol=1e-4)


def test_exact_search_bad_input(rng):
    base = rng.standard_normal((50, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="dimension 7"):
        vecsift.exact_search(base, np.ones((1, 7)), 3)
    with pytest.raises(ValueError, match="k must be positive"):
        vecsift.exact_search(base, base[:1], 0)
    with pytest.raises(ValueError, match="metric"):
        vecsift.exact_search(base, base[:1], 3, metric="hamming")
    with pytest.raises(ValueError, match="NaN"):
        vecsift.exact_search(base, np.full((1, 8), np.nan), 3)
    bad = base.copy()
    bad[3, 3] = np.inf
    with pytest.raises(ValueError, match="base contain NaN"):
        vecsift.exact_search(bad, base[:1], 3)
    with pytest.raises(TypeError, match="numeric"):
        vecsift.exact_search(base, [["x"] * 8], 3)
    with pytest.raises(ValueError, match="allow mask"):
        vecsift.exact_search(base, base[:1], 3, allow=np.ones(49, bool))


def test_exact_search_does_not_copy_float32_input(rng, monkeypatch):
    base = rng.standard_normal((100, 16)).astype(np.float32)
    seen = {}
    real = _core.exact_search

    def spy(b, q, *args):
        seen["base"], seen["queries"] = b, q
        return real(b, q, *args)

    monkeypatch.setattr(_core, "exact_search", spy)
    vecsift.exact_search(base, base[:3], 2)
    assert seen["base"] is base
    assert np.shares_memory(seen["queries"], base)


def _share_of_python_turns(fn):
    """Fraction of its solo loop rate the main thread keeps while fn runs in a thread.

    A native call that keeps the GIL leaves the main thread only one switch
    interval (5 ms) of turns for the whole call; one that releases it leaves
    the main thread running at nearly full speed on the other core.
    """
    import threading
    import time

    def loop_rate(duration):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < duration:
            n += 1
        return n / duration

    solo = loop_rate(0.1)
    t0 = time.perf_counter()
    fn()
    alone = time.perf_counter() - t0
    t = threading.Thread(target=fn)
    count = 0
    t.start()
    while t.is_alive():
        time.perf_counter()  # same work per turn as loop_rate
        count += 1
    t.join()
    return count / (solo * alone)


def test_kernels_release_the_gil(rng):
    base = rng.standard_normal((400_000, 64)).astype(np.float32)
    queries = rng.standard_normal((200, 64)).astype(np.float32)
    # Control: sorted() on a list is C code that keeps the GIL; the measure must see that.
    values = rng.random(1_500_000).tolist()
    assert _share_of_python_turns(lambda: sorted(values)) < 0.1
    assert _share_of_python_turns(lambda: vecsift.exact_search(base, queries, 10, threads=1)) > 0.1
    index = vecsift.BinaryIndex(64)
    index.add(base)
    assert _share_of_python_turns(lambda: index.search(queries, 10, threads=1)) > 0.1
