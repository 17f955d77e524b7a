"""pgvector's vocabulary: operator / operator class metric names, ef_search, and Hit.distance as pgvector reports it."""
import numpy as np
import pytest

import vecsift


@pytest.mark.parametrize("spelling,metric", [("<=>", "cosine"), ("vector_cosine_ops", "cosine"), ("<#>", "ip"),
                                             ("vector_ip_ops", "ip"), ("<->", "l2"), ("halfvec_l2_ops", "l2")])
def test_pgvector_metric_names_and_distances(tmp_path, spelling, metric):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    q = rng.standard_normal(8).astype(np.float32)
    c = vecsift.Collection.create(tmp_path / "c", 8, metric=spelling, index="hnsw", m=8, ef_construction=64)
    assert c.metric == metric
    c.add([str(i) for i in range(300)], x)
    c.commit()
    hits = c.search(q, k=5, ef_search=100)
    assert [h.id for h in hits] == [h.id for h in c.search(q, k=5, ef=100)]
    # what pgvector's operator computes, in numpy
    if metric == "cosine":
        want = 1 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    elif metric == "ip":
        want = -(x @ q)
    else:
        want = np.linalg.norm(x - q, axis=1)
    order = np.argsort(want, kind="stable")[:5]
    assert [h.id for h in hits] == [str(i) for i in order]
    np.testing.assert_allclose([h.distance for h in hits], want[order], rtol=1e-4, atol=1e-4)
    assert c.search(text=None, vector=q, k=1)[0].distance is not None
    with pytest.raises(ValueError, match="disagree"):
        c.search(q, k=5, ef=10, ef_search=20)
    c.close()


@pytest.mark.parametrize("op", ["<+>", "<~>", "vector_l1_ops"])
def test_unsupported_pgvector_operators_are_named(tmp_path, op):
    with pytest.raises(ValueError, match="not supported"):
        vecsift.Collection.create(tmp_path / "c", 8, metric=op)
