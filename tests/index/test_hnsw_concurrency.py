"""HNSW thread safety: concurrent searches, searches during add and delete."""
import threading

import numpy as np

import vecsift
from hnsw_helpers import build, random_data


def test_concurrent_searches_match_serial():
    x, q = random_data(n=5000, d=16, nq=200, seed=8)
    index = build(x, "cosine")
    ref = index.search(q, 10, ef=80, threads=1)
    results, errors = {}, []

    def worker(t):
        try:
            for rep in range(3):
                results[(t, rep)] = index.search(q, 10, ef=80, threads=1 + t % 2)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for labels, scores in results.values():
        np.testing.assert_array_equal(labels, ref[0])
        np.testing.assert_array_equal(scores, ref[1])


def test_search_during_add_and_delete_never_returns_partial_or_deleted_rows():
    rng = np.random.default_rng(3)
    d = 16
    x = rng.standard_normal((12_000, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = vecsift.HNSWIndex(d, "ip")
    index.add(x[:2000])
    state = {"deleted": np.arange(0, 2000, 7)}  # rows whose mark_deleted has returned
    index.mark_deleted(state["deleted"])
    stop = threading.Event()
    errors, seen = [], []

    def searcher():
        try:
            while not stop.is_set():
                qi = rng.integers(0, len(x), 8)
                deleted = state["deleted"]
                labels, scores = index.search(x[qi], 10, ef=40, threads=1)
                ok = labels >= 0
                assert ok.all()  # plenty of live rows at every moment
                # Every returned row is complete: its score is the exact score of its stored vector.
                exact = np.einsum("qkd,qd->qk", x[labels], x[qi])
                np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-5)
                assert not np.isin(labels, deleted).any()
                seen.append(labels.max())
        except Exception as exc:
            errors.append(exc)

    workers = [threading.Thread(target=searcher) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        for start in range(2000, len(x), 2000):
            index.add(x[start:start + 2000], threads=2)
            more = np.arange(start, start + 2000, 11)
            index.mark_deleted(more)
            state["deleted"] = np.union1d(state["deleted"], more)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not errors, errors[0]
    assert len(seen) > 10 and max(seen) >= 2000  # searches ran while rows were being added
    assert len(index) == len(x) - len(state["deleted"])
