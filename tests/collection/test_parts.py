"""collection.parts.search_parts: one query over several collections' bq indexes in two native calls (what a
node actor of a sharded collection does with its shards). Per part, the rows and scores must be exactly what
that collection's own fast path (Collection._search_rows) returns, and it declines (None) every call that
route does not serve, so the caller searches part by part as before."""
import numpy as np
import pytest

import vecsift
from vecsift import _core
from vecsift.collection import search_parts

DIM = 24


def _rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _shards(tmp_path, metric="cosine", n=9000, parts=3, **index_params):  # 3,000 rows a part: the index path
    x = _rows(n)
    cols = []
    for s in range(parts):
        col = vecsift.Collection.create(str(tmp_path / f"s{s}"), DIM, metric, index="bq", **index_params)
        col.add([f"r{i}" for i in range(s, n, parts)], x[s::parts])
        col.commit()
        cols.append(col)
    return cols


def _plans(cols, k, **kw):
    got = [col._search_part(k, **kw) for col in cols]
    assert all(g is not None for g in got)
    return [p for p, _ in got]


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
@pytest.mark.parametrize("params", [{}, {"bits": 1}, {"bits": 4, "policy": "fixed", "oversample": 3}])
def test_each_part_gets_its_own_search(tmp_path, metric, params):
    cols = _shards(tmp_path, metric, **params)
    for q in _rows(25, seed=1):
        for k in (1, 10, 37):
            got = search_parts(q, _plans(cols, k), k)
            assert got == [col._search_rows(q, k)[:2] for col in cols]
    for col in cols:
        col.close()


def test_one_part_and_parts_of_other_sizes_and_candidates(tmp_path):
    cols = _shards(tmp_path / "a", parts=1, n=3000)
    cols += _shards(tmp_path / "b", parts=1, n=6000, oversample=9)  # more candidates: a wider call
    for q in _rows(10, seed=2):
        for k in (1, 10, 100):
            assert search_parts(q, _plans(cols[:1], k), k) == [cols[0]._search_rows(q, k)[:2]]
            assert search_parts(q, _plans(cols, k), k) == [col._search_rows(q, k)[:2] for col in cols]
    for col in cols:
        col.close()


def test_declines_vectors_it_does_not_check_itself(tmp_path):
    cols = _shards(tmp_path)
    plans = _plans(cols, 10)
    q = _rows(1, seed=3)[0]
    assert search_parts(q, plans, 10) is not None
    nan = q.copy()
    nan[3] = np.nan
    for bad in (q[:8], q.astype(np.float64), nan, q.reshape(1, -1), list(q), np.stack([q, q], axis=1)[:, 0]):
        assert search_parts(bad, plans, 10) is None  # the last: q's values, not contiguous
    for col in cols:
        col.close()


def test_declines_parts_with_other_settings_or_another_index(tmp_path):
    cols = _shards(tmp_path / "a")
    other = _shards(tmp_path / "b", bits=1, parts=1)  # the same query bits and bound policy: still fine
    fixed = _shards(tmp_path / "c", policy="fixed", parts=1)
    q = _rows(1, seed=4)[0]
    assert search_parts(q, _plans(cols + other, 10), 10) is not None
    assert search_parts(q, _plans(cols + fixed, 10), 10) is None  # policies differ
    plain = vecsift.Collection.create(str(tmp_path / "h"), DIM, "cosine", index="hnsw")
    plain.add([f"r{i}" for i in range(3000)], _rows(3000, seed=5))
    plain.commit()
    assert plain._search_part(10) is None  # a graph: searched on its own
    unranked = _shards(tmp_path / "d", rescore="none", parts=1)
    assert unranked[0]._search_part(10) is None
    for col in cols + other + fixed + [plain] + unranked:
        col.close()


def test_declines_what_the_fast_path_declines(tmp_path):
    cols = _shards(tmp_path)
    col = cols[0]
    assert col._search_part(0) is None and col._search_part(10**9) is None and col._search_part(10, threads=-1) is None
    assert col._search_part(10, ef=0) is None
    col.delete(ids=["r0"])
    col.commit()
    assert col._search_part(10) is None  # deleted rows are filtered on the general path
    ten = vecsift.Collection.create(str(tmp_path / "t"), DIM, "cosine", index="bq")
    ten.add([f"r{i}" for i in range(3000)], _rows(3000), tenant=["a"] * 3000)
    ten.commit()
    assert ten._search_part(10) is None  # unscoped calls are refused on the general path
    ten.close()
    cols[1].close()
    assert cols[1]._search_part(10) is None
    cols[2].close()
    col.close()


def test_a_growing_index_is_declined(tmp_path):
    cols = _shards(tmp_path)
    plans = _plans(cols, 10)
    cols[1].add(["new"], _rows(1, seed=9))
    cols[1].commit()  # the part was made for the snapshot before: its index has grown since
    assert search_parts(_rows(1, seed=6)[0], plans, 10) is None
    assert search_parts(_rows(1, seed=6)[0], _plans(cols, 10), 10) is not None
    for col in cols:
        col.close()


def test_core_calls_equal_one_index_at_a_time(tmp_path):
    cols = _shards(tmp_path, metric="ip")
    plans = _plans(cols, 10)
    cores = [p.core for p in plans]
    for q in _rows(10, seed=7):
        cand, kept = _core.quant_parts_candidates(cores, q, [40, 17, 40], [1, 1, 1], 10, 4, 1.0)
        assert cand.shape == (3, 40)
        for i, (core, c) in enumerate(zip(cores, [40, 17, 40])):
            ref, _, lo, hi = core.search(q[None, :], c, 4, None, None, 1, -1, 1.0)
            assert _core.bound_prune(ref, lo, hi, 10) == kept[i]
            assert (cand[i, :c] == ref[0]).all() and (cand[i, c:] == -1).all()
        fixed, kept = _core.quant_parts_candidates(cores, q, [40, 40, 40], [1, 1, 1], 10, 4)
        assert kept == [40, 40, 40]
        rows = [p.vectors for p in plans]
        ids, scores = _core.quant_parts_rescore(rows, q, cand, 10, "ip")
        for i in range(3):
            ri, rs = _core.rescore(np.asarray(rows[i]), q[None, :], cand[i:i + 1], 10, "ip")
            assert (ids[i] == ri[0]).all() and (scores[i] == rs[0]).all()
    for col in cols:
        col.close()


def test_core_calls_check_their_arguments(tmp_path):
    cols = _shards(tmp_path)
    cores = [p.core for p in _plans(cols, 10)]
    q = _rows(1)[0]
    with pytest.raises(ValueError, match="empty"):
        _core.quant_parts_candidates([], q, [], [], 10, 4)
    with pytest.raises(ValueError, match="one value per index"):
        _core.quant_parts_candidates(cores, q, [40], [1, 1, 1], 10, 4)
    with pytest.raises(ValueError, match="dimension"):
        _core.quant_parts_candidates(cores, q[:8], [40] * 3, [1] * 3, 10, 4)
    with pytest.raises(ValueError, match="query_bits"):
        _core.quant_parts_candidates(cores, q, [40] * 3, [1] * 3, 10, 3)
    with pytest.raises(ValueError, match="k must be positive"):
        _core.quant_parts_candidates(cores, q, [40] * 3, [1] * 3, 0, 4)
    with pytest.raises(ValueError, match="confidence"):
        _core.quant_parts_candidates(cores, q, [40] * 3, [1] * 3, 10, 4, float("nan"))
    with pytest.raises(TypeError):
        _core.quant_parts_candidates([object()], q, [40], [1], 10, 4)
    rows = [np.zeros((5, DIM), np.float32)] * 3
    cand = np.full((3, 4), -1, np.int64)
    cand[1, 0] = 5
    with pytest.raises(ValueError, match="below"):
        _core.quant_parts_rescore(rows, q, cand, 10, "ip")
    with pytest.raises(ValueError, match="one row per part"):
        _core.quant_parts_rescore(rows[:2], q, cand, 10, "ip")
    with pytest.raises(ValueError, match="dimension"):
        _core.quant_parts_rescore(rows, q[:8], cand, 10, "ip")
    bad = np.zeros((5, DIM), np.float32)
    bad[2, 0] = np.inf
    cand[1, 0] = 2
    with pytest.raises(ValueError, match="NaN or infinite"):
        _core.quant_parts_rescore([rows[0], bad, rows[0]], q, cand, 10, "ip")
    for col in cols:
        col.close()
