"""The public read API (Collection.snapshot()) and the cascade as functions of a snapshot."""
import numpy as np
import pytest

import vecsift
from vecsift.collection import fuse, retrieve, search_request

from collection_util import clustered, exact_ref, unit


def make(tmp_path, n=3000, dim=16, index="bq"):
    x = clustered(n, dim, seed=4)
    c = vecsift.Collection.create(tmp_path / "c", dim=dim, index=index)
    c.add([f"id{i}" for i in range(n)], x, texts=[f"word{i % 7} common" for i in range(n)])
    c.commit()
    return c, x


def test_snapshot_is_isolated_and_exact_matches_numpy(tmp_path):
    c, x = make(tmp_path)
    snap = c.snapshot()
    c.delete(ids=["id0", "id1"])
    assert len(snap.live) == 3000 and len(c.snapshot().live) == 2998  # the old snapshot is unchanged
    q = clustered(4, 16, seed=9)
    rows, scores = c.snapshot().exact(q, 10, exclude=[5, 6])
    ref, ref_s = exact_ref(x, q, 10, "cosine", allowed=[i for i in range(3000) if i not in (0, 1, 5, 6)])
    np.testing.assert_allclose(scores, ref_s, atol=1e-4)
    assert not np.isin(rows, [0, 1, 5, 6]).any()
    got, _ = c.snapshot().search_dense(q, 10, oversample=64)
    assert (got == c.search_rows(q, k=10, oversample=64)[0]).all()
    own, vecs = snap.sample_rows(5, seed=1)
    assert (np.diff(own) > 0).all() and np.allclose(vecs, unit(x[own]), atol=1e-6)
    assert len(snap.table) == 3000 and (snap.rows() == np.arange(3000)).all()
    c.close()
    with pytest.raises(vecsift.VecsiftError):
        c.snapshot()


def test_retrieve_and_fuse_give_the_facade_results(tmp_path):
    c, x = make(tmp_path)
    snap = c.snapshot()
    q = x[:3]
    texts = ["word3 common", "word1", "word5 common"]
    req = search_request(q, texts, k=5, candidates=50)
    assert req.mode == "hybrid"
    lists = retrieve(snap, req, snap.allow())
    assert lists.dense[0].shape == (3, 50) and len(lists.sparse) == 3
    fused = fuse(req, lists)
    hits = c.search_batch(q, texts, k=5, candidates=50)
    for (rows, scores, _), hs in zip(fused, hits):
        assert [snap.table["id"][int(r)].as_py() for r in rows] == [h.id for h in hs]
        np.testing.assert_allclose(scores, [h.score for h in hs])
    with pytest.raises(ValueError, match="candidates"):
        search_request(q, texts, k=5, candidates=2)
    c.close()
