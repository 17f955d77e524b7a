"""index="hnsw": the graph behind the same collection API (filters, deletes, persistence, compaction)."""
import threading

import numpy as np
import pytest

import vecsift

from collection_util import clustered, exact_ref, ids_of

N, DIM = 6000, 32


def make(tmp_path, **kw):
    x = clustered(N, DIM, seed=21)
    c = vecsift.Collection.create(tmp_path / "h", DIM, index="hnsw", m=12, ef_construction=80, **kw)
    c.add([f"r{i}" for i in range(N)], x, tenant=np.array(["a", "b"])[np.arange(N) % 2],
          doc_ids=[f"d{i // 3}" for i in range(N)])
    c.commit()
    return c, x


def recall(rows, truth):
    return np.mean([len(set(r) & set(t)) / len(t) for r, t in zip(rows, truth)])


def test_hnsw_recall_filters_and_scores(tmp_path):
    c, x = make(tmp_path)
    assert c.index == "hnsw" and c.index_params["m"] == 12
    q = clustered(40, DIM, seed=22)
    allowed = np.flatnonzero(np.arange(N) % 2 == 0)
    truth, truth_s = exact_ref(x, q, 10, "cosine", allowed)
    rows, scores = c.search_rows(q, k=10, tenant="a", ef=128)
    assert recall(rows, truth) >= 0.9
    assert set(rows.ravel()) <= set(allowed)
    # scores are exact cosine similarities of the returned rows
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", xn[rows], qn), atol=1e-4)
    with pytest.raises(ValueError, match="tenant"):
        c.search(q[0])
    c.close()


def test_hnsw_delete_persist_compact(tmp_path):
    c, x = make(tmp_path)
    c.delete(doc_ids=[f"d{i}" for i in range(0, 2000, 2)])
    gone = {f"r{i}" for i in range(N) if (i // 3) % 2 == 0 and i // 3 < 2000}
    hits = c.search_batch(x[:30], k=20, tenant="a")
    assert all(len(h) == 20 and not gone & set(ids_of(h)) for h in hits)
    c.commit()
    c.close()
    c = vecsift.open(tmp_path / "h")
    assert len(c) == N - len(gone)
    assert c.search(x[4], k=1, tenant="a")[0].id == "r4"  # doc1 kept
    before = [ids_of(h) for h in c.search_batch(x[:10], k=5, tenant="b", ef=200)]
    c.compact()
    after = [ids_of(h) for h in c.search_batch(x[:10], k=5, tenant="b", ef=200)]
    assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(before, after)]) >= 0.9
    c.close()
    with vecsift.open(tmp_path / "h", readonly=True) as r:
        assert len(r) == N - len(gone) and not gone & set(r.ids())


def test_hnsw_canary(tmp_path):
    x = clustered(500, DIM, seed=23)
    c = vecsift.Collection.create(tmp_path / "hc", DIM, index="hnsw")
    c.add([f"r{i}" for i in range(500)], x, acl=[["eng"]] * 500)
    canary = x[7] * 1.01
    c.add(["canary"], canary[None], acl=[["G"]])
    c.commit()
    for groups in ([], ["eng"], ["g"]):
        for k in (1, 10, 600):
            assert "canary" not in ids_of(c.search(canary, k=k, groups=groups, ef=600))
    assert c.search(canary, k=1, groups=["G"])[0].id == "canary"
    c.close()


def test_hnsw_search_while_committing(tmp_path):
    c, x = make(tmp_path)
    more = clustered(1200, DIM, seed=24)
    errors, done = [], threading.Event()
    committed = {f"r{i}" for i in range(N)}

    def reader():
        try:
            while not done.is_set():
                for h in c.search_batch(more[:8], k=10, tenant="a"):
                    assert set(ids_of(h)) <= committed | {f"n{i}" for i in range(1200)}
                    assert all(not i.startswith("n") or int(i[1:]) < published[0] for i in ids_of(h))
        except Exception as exc:
            errors.append(exc)

    published = [0]
    t = threading.Thread(target=reader)
    t.start()
    for s in range(0, 1200, 400):
        c.add([f"n{i}" for i in range(s, s + 400)], more[s:s + 400], tenant="a")
        published[0] = s + 400  # visible from the moment the commit begins
        c.commit()
    done.set()
    t.join(60)
    assert not errors, errors[0]
    assert c.search(more[1000], k=1, tenant="a")[0].id == "n1000"
    c.close()
