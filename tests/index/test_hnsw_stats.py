"""Search counters are plausible: the exact path counts the allowed rows, a walk computes at least k
distances and fewer than a full scan, and more ef means more work."""
import numpy as np

import vecsift
from hnsw_helpers import random_data


def test_hnsw_search_stats():
    x, q = random_data(n=20000, d=16, nq=20, seed=3)
    index = vecsift.HNSWIndex(16, "l2", m=8, ef_construction=60)
    index.add(x)
    labels, scores, st = index.search(q, k=10, ef=40, return_stats=True)
    np.testing.assert_array_equal(labels, index.search(q, k=10, ef=40)[0])
    assert set(st) == {"distances", "hops", "scanned", "lists_probed"}
    assert (st["distances"] >= 10).all() and (st["distances"] < len(x) // 4).all()
    assert (st["hops"] >= 1).all() and (st["scanned"] == 0).all() and (st["lists_probed"] == 0).all()
    _, _, wide = index.search(q, k=10, ef=200, return_stats=True)
    assert wide["distances"].sum() > st["distances"].sum()
    allowed = np.arange(0, 20000, 100, dtype=np.int64)  # 200 rows: the planner scans them exactly
    _, _, small = index.search(q, k=10, allow=allowed, return_stats=True)
    assert (small["scanned"] == 200).all() and (small["distances"] == 200).all() and (small["hops"] == 0).all()


def test_collection_search_stats(tmp_path):
    x, q = random_data(n=5000, d=16, nq=4, seed=4)
    for index in ("hnsw", "bq"):
        c = vecsift.Collection.create(tmp_path / index, dim=16, metric="l2", index=index, filter_fields=["g"])
        c.add([f"r{i}" for i in range(5000)], x, metadata=[{"g": i % 10} for i in range(5000)])
        c.commit()
        st = vecsift.collection.SearchStats()
        c.search_batch(q, k=5, where={"g": 3}, stats=st)  # 500 allowed rows: below the planner's floor
        assert (st.path, st.allowed, st.queries, st.scanned, st.distances) == ("exact", 500, 4, 2000, 2000)
        st = vecsift.collection.SearchStats()
        c.search(q[0], k=5, stats=st)
        assert st.path == "index" and st.allowed == 5000 and st.queries == 1
        if index == "hnsw":
            assert 5 <= st.distances < 5000 and st.hops >= 1
        else:
            # bound policy: of max(k * oversample, min_candidates) = 20 estimates, only those whose
            # bound reaches the k-th best are read back, and at least the k returned
            assert st.codes_scanned == 5000 and st.rescored == st.distances and 5 <= st.rescored <= 20
        c.close()
