"""Filtered HNSW search: only allowed labels, k whenever possible, recall at 1% and 10%."""
import numpy as np
import pytest
from pyroaring import BitMap, FrozenBitMap

import vecsift
from hnsw_helpers import GRAPH, SCAN, build, glove_slice, recall


@pytest.fixture(scope="module")
def glove():
    x, q = glove_slice(n=20_000, nq=100, seed=3)
    tenant = np.random.default_rng(11).integers(0, 100, len(x))
    return x, q, tenant, build(x, "cosine")


@pytest.mark.parametrize("selectivity", [0.01, 0.10])
@pytest.mark.parametrize("mode", [0, GRAPH, SCAN])
def test_filtered_recall_and_only_allowed(glove, selectivity, mode):
    x, q, tenant, index = glove
    allowed = tenant < int(selectivity * 100)
    truth, _ = vecsift.exact_search(x, q, 10, "cosine", allow=allowed)
    ef = 200 if selectivity < 0.05 else 100
    labels, scores = index.search(q, 10, ef=ef, allow=allowed, _filter_mode=mode)
    assert (labels >= 0).all(), "k results whenever k allowed rows exist"
    assert allowed[labels].all()
    assert recall(labels, truth) >= (0.99 if mode == SCAN else 0.95)
    if mode == SCAN:
        np.testing.assert_array_equal(labels, truth)


def test_allow_forms_agree(glove):
    x, q, tenant, index = glove
    allowed = tenant == 7
    ids = np.flatnonzero(allowed)
    ref = index.search(q[:20], 10, allow=allowed)
    for form in (ids, ids.astype(np.uint32), ids.tolist(), BitMap(ids), FrozenBitMap(ids)):
        got = index.search(q[:20], 10, allow=form)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


def test_allow_validation(glove):
    x, q, tenant, index = glove
    with pytest.raises(ValueError, match="label_bound"):
        index.search(q[:1], 10, allow=np.ones(len(x) - 1, bool))
    with pytest.raises(ValueError, match="not in the index"):
        index.search(q[:1], 10, allow=[0, len(x)])
    with pytest.raises(ValueError):
        index.search(q[:1], 10, allow=[-1])
    with pytest.raises(TypeError):
        index.search(q[:1], 10, allow=np.array([0.5]))


def test_fewer_allowed_than_k_pads(glove):
    x, q, tenant, index = glove
    labels, scores = index.search(q[:3], 10, allow=[5, 17, 900])
    assert sorted(labels[0, :3]) == [5, 17, 900]
    assert (labels[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    labels, _ = index.search(q[:3], 10, allow=np.zeros(len(x), bool))
    assert (labels == -1).all()


def test_always_k_in_graph_mode_even_when_allowed_rows_are_far(glove):
    # The 40 allowed rows are the ones *farthest* from the query: the walk must
    # not stop short of k.
    x, q, tenant, index = glove
    sims = x @ q[0]
    far = np.argsort(sims)[:40]
    labels, _ = index.search(q[:1], 30, ef=16, allow=far, _filter_mode=GRAPH)
    assert (labels >= 0).all() and np.isin(labels, far).all()
    truth, _ = vecsift.exact_search(x, q[:1], 30, "cosine", allow=BitMap(far))
    assert recall(labels, truth) >= 0.9


def test_filter_with_deletes_and_custom_labels():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4000, 16), dtype=np.float32)
    q = rng.standard_normal((30, 16), dtype=np.float32)
    labels = np.arange(4000, dtype=np.uint64) * 3 + 100
    index = vecsift.HNSWIndex(16, "l2")
    index.add(x, ids=labels)
    allowed_rows = np.flatnonzero(rng.random(4000) < 0.3)
    deleted_rows = allowed_rows[::4]
    index.mark_deleted(labels[deleted_rows].astype(np.int64))
    live = np.setdiff1d(allowed_rows, deleted_rows)
    truth, _ = vecsift.exact_search(x, q, 10, "l2", allow=live)
    mask = np.zeros(index.label_bound, bool)
    mask[labels[allowed_rows].astype(np.int64)] = True
    for mode in (GRAPH, SCAN):
        for allow in (labels[allowed_rows], mask):
            got, _ = index.search(q, 10, ef=100, allow=allow, _filter_mode=mode)
            assert np.isin(got, labels[live].astype(np.int64)).all()
            assert recall(got, labels[truth].astype(np.int64)) >= 0.95


def test_scan_threshold_grows_with_ef_and_n(glove):
    x, q, tenant, index = glove
    t64, t256 = index._g.scan_threshold(64), index._g.scan_threshold(256)
    assert 0 < t64 < t256 < len(x)
