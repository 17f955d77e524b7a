"""The single-query fast paths: same answers as the general paths, same errors."""
import threading
import time

import numpy as np
import pytest

import vecsift
from vecsift._arrays import as_vectors, unit_rows
from vecsift.collection.rwlock import RWLock


def test_unit_rows_matches_linalg_norm_bit_for_bit():
    x = np.random.default_rng(0).standard_normal((300, 67)).astype(np.float32) * np.float32(7.5)
    x[3] = 0
    ref_n = np.linalg.norm(x, axis=1, keepdims=True)
    ref = x / np.where(ref_n > 0, ref_n, 1).astype(np.float32)
    out = unit_rows(x)
    assert out.dtype == np.float32
    assert np.array_equal(out, ref)
    assert not out[3].any()


def test_as_vectors_fast_path_same_checks():
    q = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    out = as_vectors(q, "vector", dim=16)
    assert out.shape == (1, 16) and np.shares_memory(out, q)
    m = np.stack([q, q])
    assert as_vectors(m, "vectors", dim=16) is m
    with pytest.raises(ValueError, match="dimension 16, expected 8"):
        as_vectors(q, "vector", dim=8)
    bad = q.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        as_vectors(bad, "vector", dim=16)
    with pytest.raises(ValueError, match="1-d or 2-d"):
        as_vectors(np.zeros((1, 2, 16), np.float32), "vector")
    with pytest.raises(ValueError, match="at least one column"):
        as_vectors(np.zeros((3, 0), np.float32), "vector")
    # non-contiguous and other dtypes go through the general path, same result
    assert np.array_equal(as_vectors(m[:, ::1].T.copy().T, "v"), m)
    assert np.array_equal(as_vectors(q.astype(np.float64), "v"), q[None])


def test_rwlock_writer_excludes_readers_and_blocks_new_ones():
    lock = RWLock()
    log = []
    in_read = threading.Event()
    release_reader = threading.Event()

    def reader(name, hold):
        with lock.read():
            log.append(("r+", name))
            if hold:
                in_read.set()
                release_reader.wait(5)
            log.append(("r-", name))

    def writer():
        with lock.write():
            log.append(("w+",))
            time.sleep(0.02)
            log.append(("w-",))

    t1 = threading.Thread(target=reader, args=("a", True))
    t1.start()
    assert in_read.wait(5)
    tw = threading.Thread(target=writer)
    tw.start()
    while not lock._waiting:  # the writer is queued behind reader a
        time.sleep(0.001)
    t2 = threading.Thread(target=reader, args=("b", False))  # must wait for the writer
    t2.start()
    time.sleep(0.02)
    assert ("r+", "b") not in log and ("w+",) not in log
    release_reader.set()
    for t in (t1, tw, t2):
        t.join(5)
    assert log.index(("r-", "a")) < log.index(("w+",)) < log.index(("w-",)) < log.index(("r+", "b"))
    assert lock._readers == 0 and not lock._writer and lock._waiting == 0


def test_rwlock_many_threads_consistent():
    lock = RWLock()
    state = {"writing": False, "bad": 0, "reads": 0}
    count = threading.Lock()

    def reader():
        for _ in range(300):
            with lock.read():
                if state["writing"]:
                    state["bad"] += 1
                with count:
                    state["reads"] += 1

    def writer():
        for _ in range(50):
            with lock.write():
                state["writing"] = True
                state["writing"] = False

    ts = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert state["bad"] == 0 and state["reads"] == 1200


def _coll(tmp_path, index, n=3000, dim=24):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / index, dim, "cosine", index=index)
    c.add([f"id{i}" for i in range(n)], x)
    c.commit()
    return c, x, rng


@pytest.mark.parametrize("index", ["hnsw", "bq"])
def test_single_query_matches_batch_and_threads(tmp_path, index):
    c, x, rng = _coll(tmp_path, index)
    qs = rng.standard_normal((20, x.shape[1])).astype(np.float32)
    batch = c.search_batch(vectors=qs, k=7, threads=1)
    for i, q in enumerate(qs):
        one = c.search(vector=q, k=7)
        t2 = c.search(vector=q, k=7, threads=2)
        as_list = c.search(vector=q.tolist(), k=7)  # general conversion path
        for hits in (one, t2, as_list):
            assert [h.id for h in hits] == [h.id for h in batch[i]]
            assert [h.dense_rank for h in hits] == list(range(1, 8))
            assert np.allclose([h.score for h in hits], [h.score for h in batch[i]], atol=1e-6)
            assert np.allclose([h.distance for h in hits], [1 - h.score for h in hits])
    c.close()


def test_hits_for_short_result_lists(tmp_path):
    c, x, _ = _coll(tmp_path, "hnsw", n=5)
    hits = c.search(vector=x[0], k=9)
    assert len(hits) == 5 and hits[0].id == "id0"
    assert [h.dense_rank for h in hits] == [1, 2, 3, 4, 5]
    many = c.search_batch(vectors=x[:3], k=9)
    assert [len(h) for h in many] == [5, 5, 5]
    assert [h[0].id for h in many] == ["id0", "id1", "id2"]
    # build_dense with padding in the middle of a batch
    b = c.snapshot().hits
    rows = np.array([[2, 0, -1], [-1, -1, -1], [4, 3, 1]], np.int64)
    scores = np.array([[0.9, 0.5, -np.inf], [-np.inf] * 3, [0.8, 0.7, 0.1]], np.float32)
    out = b.build_dense(rows, scores, metric="cosine")
    assert [[h.id for h in q] for q in out] == [["id2", "id0"], [], ["id4", "id3", "id1"]]
    assert [[h.dense_rank for h in q] for q in out] == [[1, 2], [], [1, 2, 3]]
    assert out[2][2].score == pytest.approx(0.1)
    c.close()


def test_hnsw_core_pads_with_minus_inf():
    # HNSWDense.search relies on it (it no longer re-pads)
    ix = vecsift.HNSWIndex(4, "l2")
    ix.add(np.eye(4, dtype=np.float32))
    ix.mark_deleted([1])
    lab, sc = ix.search(np.ones((2, 4), np.float32), 6)
    assert (lab[:, 3:] == -1).all() and np.isneginf(sc[:, 3:]).all() and np.isfinite(sc[:, :3]).all()
    i8 = vecsift.HNSWIndex(4, "l2", codes="int8")
    i8.add(np.eye(4, dtype=np.float32))
    lab, sc = i8.search(np.ones(4, np.float32), 6, allow=np.array([0, 2]))
    assert lab[0, 2:].tolist() == [-1] * 4 and np.isneginf(sc[0, 2:]).all()


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_single_query_hits_with_padding_and_distances(tmp_path, metric):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "c", 8, metric, index="hnsw")
    c.add([f"r{i}" for i in range(6)], x)
    c.commit()
    c.delete(ids=["r2"])
    c.commit()
    hits = c.search(vector=x[0], k=9)
    assert len(hits) == 5 and "r2" not in [h.id for h in hits]
    assert [h.dense_rank for h in hits] == [1, 2, 3, 4, 5]
    from vecsift.collection.pgvocab import pg_distance
    assert [h.distance for h in hits] == pg_distance(np.array([h.score for h in hits]), metric).tolist()
    b = c.snapshot().hits
    out = b.build_dense(np.array([[3, -1, 1]]), np.array([[0.5, -np.inf, 0.25]], np.float32), metric=metric)
    assert [(h.id, h.dense_rank) for h in out[0]] == [("r3", 1), ("r1", 3)]
    c.close()


@pytest.mark.parametrize("index,params", [("hnsw", {}), ("hnsw", {"codes": "int8"}), ("bq", {})])
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_fast_path_equals_general_path(tmp_path, index, params, metric):
    rng = np.random.default_rng(7)
    n, dim = 2500, 16
    x = rng.standard_normal((n, dim)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "c", dim, metric, index=index, **params)
    c.add([f"id{i}" for i in range(n)], x, metadata=[{"year": 2000 + i % 7, "w": i / 4} for i in range(n)],
          texts=[f"t{i}" for i in range(n)], char_range=[(i, i + 3) for i in range(n)])
    c.commit()
    for q in rng.standard_normal((10, dim)).astype(np.float32):
        fast = c.search(vector=q, k=8, ef=40)
        assert c._one[3] is not None  # this call took the fast path
        slow = c.search(vector=q.tolist(), k=8, ef=40)  # a list goes through the general conversion
        assert fast == slow
        assert [h.dense_rank for h in fast] == list(range(1, 9))
        from vecsift.collection.pgvocab import pg_distance
        assert [h.distance for h in fast] == pg_distance(np.array([h.score for h in fast]), metric).tolist()
        ref = {h.id: h for h in fast}
        for h in fast:
            i = int(h.id[2:])
            assert h.metadata == {"year": 2000 + i % 7, "w": i / 4} and h.text == f"t{i}"
            assert h.char_range == (i, i + 3)
        assert c.search(vector=q, k=8, ef_search=40) == fast  # pgvector's name
        assert len(ref) == 8
    c.close()


def test_fast_path_keeps_the_security_rules_and_errors(tmp_path):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "t", 8, "cosine", index="hnsw")
    c.add([f"a{i}" for i in range(300)], x)
    c.commit()
    q = x[0].copy()
    assert c.search(vector=q, k=3)[0].id == "a0"
    bad = q.copy()
    bad[1] = np.nan
    with pytest.raises(ValueError, match="vector contain NaN"):
        c.search(vector=bad, k=3)
    with pytest.raises(ValueError, match="dimension"):
        c.search(vector=np.zeros(5, np.float32), k=3)
    with pytest.raises(TypeError):
        c.search(vector=q, k="3")
    with pytest.raises(ValueError):
        c.search(vector=q, k=0)
    c.set_limits(max_k=5)
    with pytest.raises(ValueError, match="k"):  # LimitError
        c.search(vector=q, k=6)
    c.set_limits(max_k=10_000, max_ef=50)
    with pytest.raises(ValueError, match="ef"):
        c.search(vector=q, k=3, ef=51)
    c.set_limits(max_ef=100_000)
    # rows with a tenant staged by add() make untenanted searches refused at once, before the commit
    c.add(["b0"], x[:1], tenant="t1")
    with pytest.raises(ValueError, match="tenant"):
        c.search(vector=q, k=3)
    c.commit()
    with pytest.raises(ValueError, match="tenant"):
        c.search(vector=q, k=3)
    assert all(h.tenant == "t1" for h in c.search(vector=q, k=3, tenant="t1"))
    c.close()
    with pytest.raises(vecsift.VecsiftError, match="closed"):
        c.search(vector=q, k=3)


def test_fast_path_sees_deletes_commits_and_audit(tmp_path):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "d", 8, "cosine", index="hnsw")
    c.add([f"a{i}" for i in range(400)], x)
    c.commit()
    q = x[5].copy()
    assert c.search(vector=q, k=1)[0].id == "a5"
    c.delete(ids=["a5"])  # visible at once, committed or not
    assert "a5" not in [h.id for h in c.search(vector=q, k=10)]
    c.add(["new"], q[None] * 2)
    assert "new" not in [h.id for h in c.search(vector=q, k=10)]  # not before the commit
    c.commit()
    assert c.search(vector=q, k=1)[0].id == "new"
    c.set_audit(True)
    c.search(vector=q, k=1)
    assert c._one[3] is None  # audited searches take the general path (which records them)
    c.set_audit(False)
    c.close()


def test_fast_path_falls_back_when_the_graph_holds_rows_past_the_snapshot(tmp_path):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((200, 8)).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "g", 8, "ip", index="hnsw")
    c.add([f"a{i}" for i in range(200)], x)
    c.commit()
    snap_n = c.snapshot().n
    q = (x[3] * 100).astype(np.float32)
    # what a commit in progress does: rows added to the graph before the snapshot counts them
    c._dense.index.add(q[None], ids=np.array([snap_n], np.uint64))
    hits = c.search(vector=q, k=3)
    assert [h.id for h in hits][0] == "a3" and all(int(h.id[1:]) < snap_n for h in hits)
    c._dense.index.mark_deleted([snap_n])
    c.close()
