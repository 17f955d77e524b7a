"""Collection._search_rows: search()'s single-query fast path without Hits (for the node actors of a
sharded collection). The rows, scores and columns are those of the Hits search() returns, and it
declines (None) every call search() would not serve on its fast path, so the caller's search()
refuses, filters or raises as before."""
import dataclasses

import numpy as np
import pytest

import vecsift
from vecsift import Hit

FIELDS = [f.name for f in dataclasses.fields(Hit)]
DIM = 16


def _rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _as_columns(hits):
    return tuple([getattr(h, f) for h in hits] for f in FIELDS)


def _columns_of(col, q, k, **kw):
    got = col._search_rows(q, k, **kw)
    assert got is not None
    rows, scores, columns = got
    keep = [i for i, r in enumerate(rows) if r >= 0]
    return columns([rows[i] for i in keep], [scores[i] for i in keep], [i + 1 for i in keep])


@pytest.mark.parametrize("index,metric", [("bq", "cosine"), ("bq", "l2"), ("hnsw", "cosine"), ("hnsw", "ip")])
def test_columns_are_the_hits_search_returns(tmp_path, index, metric):
    x = _rows(3000)
    col = vecsift.Collection.create(str(tmp_path / "c"), DIM, metric, index=index)
    ids = [f"r{i}" for i in range(len(x))]
    col.add(ids, x, texts=[f"text {i}" for i in range(len(x))], doc_ids=[f"d{i // 3}" for i in range(len(x))],
            metadata=[{"n": i, "odd": i % 2 or None} for i in range(len(x))])
    col.commit()
    for q in _rows(20, seed=1):
        for k in (1, 10, 40):
            assert _columns_of(col, q, k) == _as_columns(col.search(q, k=k))
    # a subset of the rows, in another order: the same fields as those Hits
    q = _rows(1, seed=2)[0]
    rows, scores, columns = col._search_rows(q, 10)
    hits = col.search(q, k=10)
    pick = [7, 2, 5]
    assert columns([rows[i] for i in pick], [scores[i] for i in pick], [i + 1 for i in pick]) == \
        _as_columns([hits[i] for i in pick])
    assert columns([], [], []) == tuple([] for _ in FIELDS)
    col.close()


def test_declines_what_search_would_not_serve_on_its_fast_path(tmp_path):
    x = _rows(4000)
    q = _rows(1, seed=4)[0]
    col = vecsift.Collection.create(str(tmp_path / "c"), DIM, "cosine")
    col.add([f"r{i}" for i in range(len(x))], x)
    col.commit()
    assert col._search_rows(q, 10) is not None
    # bad input: search() raises it, the fast path without Hits declines it
    assert col._search_rows(q[:8], 10) is None
    assert col._search_rows(q.astype(np.float64), 10) is None
    nan = q.copy()
    nan[0] = np.nan
    assert col._search_rows(nan, 10) is None
    with pytest.raises(ValueError):
        col.search(nan, k=10)
    assert col._search_rows(q, 0) is None and col._search_rows(q, 10**9) is None
    # deleted rows: search() filters them on its general path; so must the caller
    col.delete(ids=["r0"])
    assert col._search_rows(q, 10) is None
    col.commit()
    assert col._search_rows(q, 10) is None
    col.close()
    assert col._search_rows(q, 10) is None


def test_declines_unscoped_calls_on_tenant_and_acl_collections(tmp_path):
    x = _rows(4000)
    q = _rows(1, seed=5)[0]
    for kw in ({"tenant": ["t0", "t1"] * 2000}, {"acl": [["g0"], ["g1"]] * 2000}):
        path = str(tmp_path / next(iter(kw)))
        col = vecsift.Collection.create(path, DIM, "cosine")
        col.add([f"r{i}" for i in range(len(x))], x, **kw)
        col.commit()
        assert col._search_rows(q, 10) is None
        with pytest.raises(ValueError, match="required"):
            col.search(q, k=10)  # what the caller then gets
        col.close()
    # rows staged with a tenant turn the check on before the next commit, as for search()
    col = vecsift.Collection.create(str(tmp_path / "staged"), DIM, "cosine")
    col.add([f"r{i}" for i in range(len(x))], x)
    col.commit()
    assert col._search_rows(q, 10) is not None
    col.add(["late"], x[:1], tenant="t9")
    assert col._search_rows(q, 10) is None
    col.close()


def test_declines_audited_collections(tmp_path):
    x = _rows(4000)
    col = vecsift.Collection.create(str(tmp_path / "c"), DIM, "cosine", audit={})
    col.add([f"r{i}" for i in range(len(x))], x)
    col.commit()
    assert col._search_rows(_rows(1, seed=6)[0], 10) is None  # search() records each query
    col.close()


@pytest.mark.parametrize("index", ["bq", "hnsw"])
def test_unpickled_vectors_take_the_fast_path(tmp_path, index):
    # an unpickled float32 array (from Ray, multiprocessing) has an equal dtype that is not numpy's
    # float32 singleton: it takes the fast path too, with the same Hits; other byte orders do not
    import pickle

    x = _rows(4000)
    col = vecsift.Collection.create(str(tmp_path / "c"), DIM, "cosine", index=index)
    col.add([f"r{i}" for i in range(len(x))], x)
    col.commit()
    q = _rows(1, seed=7)[0]
    u = pickle.loads(pickle.dumps(q))
    assert u.dtype == np.float32 and u.dtype is not np.dtype(np.float32)
    assert col._search_rows(u, 10) is not None
    assert col.search(u, k=10) == col.search(q, k=10)
    assert col._search_rows(q.astype(">f4"), 10) is None
    assert col.search(q.astype(">f4"), k=10) == col.search(q, k=10)
    col.close()
