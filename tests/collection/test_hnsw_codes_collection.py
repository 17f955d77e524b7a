"""Collections with index="hnsw", codes="int8": create, commit, reopen, filters, deletes, compaction."""
import numpy as np
import pytest

import vecsift


def _recall(found, truth):
    return float(np.mean([len(set(f[f >= 0]) & set(t[t >= 0])) / max(1, (t >= 0).sum()) for f, t in zip(found, truth)]))


def test_int8_collection_end_to_end(tmp_path):
    rng = np.random.default_rng(2)
    c = rng.standard_normal((30, 48)).astype(np.float32)
    x = (c[rng.integers(0, 30, 5000)] + 0.4 * rng.standard_normal((5000, 48))).astype(np.float32)
    qs = (c[rng.integers(0, 30, 40)] + 0.4 * rng.standard_normal((40, 48))).astype(np.float32)
    path = tmp_path / "c"
    coll = vecsift.Collection.create(path, 48, "cosine", index="hnsw", codes="int8", m=12, ef_construction=80)
    coll.add([f"d{i}" for i in range(5000)], x, tenant=[f"t{i % 4}" for i in range(5000)])
    coll.commit()
    assert coll.snapshot().dense.index.codes == "int8"
    exact, _ = coll.snapshot().exact(qs, 10)
    rows, scores = coll.snapshot().search_dense(qs, 10, ef=80)
    assert _recall(rows, exact) >= 0.95
    # hits for one tenant only, scores exact cosine
    hits = coll.search(vector=qs[0], k=5, tenant="t1", ef=80)
    assert len(hits) == 5 and all(int(h.id[1:]) % 4 == 1 for h in hits)
    v = x[[int(h.id[1:]) for h in hits]]
    cos = v @ qs[0] / np.linalg.norm(v, axis=1) / np.linalg.norm(qs[0])
    assert np.allclose([h.score for h in hits], cos, atol=1e-5)
    coll.delete(ids=[hits[0].id])
    coll.commit()
    assert hits[0].id not in [h.id for h in coll.search(vector=qs[0], k=5, tenant="t1", ef=80)]
    coll.close()
    ro = vecsift.open(path, readonly=True)
    assert ro.snapshot().dense.index.codes == "int8" and ro.snapshot().dense.index.mapped
    assert [h.id for h in ro.search(vector=qs[0], k=5, tenant="t1", ef=80)][0] != hits[0].id
    ro.verify()
    ro.close()
    rw = vecsift.open(path)
    rw.compact()
    assert rw.snapshot().dense.index.codes == "int8"
    rows2, _ = rw.snapshot().search_dense(qs, 10, ef=80)
    assert _recall(rows2, rw.snapshot().exact(qs, 10)[0]) >= 0.95
    rw.close()


def test_bad_codes_parameter(tmp_path):
    with pytest.raises(ValueError, match="codes"):
        vecsift.Collection.create(tmp_path / "c", 8, index="hnsw", codes="int4")
