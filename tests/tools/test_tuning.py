import numpy as np
import pytest

import vecsift
from vecsift.tools.bench import bq_rescore_search
from vecsift.eval import recall_at_k
from vecsift.tools.tune import lower_bound, tune


def clustered(rng, n, d=64, centers=50):
    c = rng.standard_normal((centers, d)).astype(np.float32)
    x = c[rng.integers(0, centers, n)] + 0.5 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_per_query_recall_hand_computed():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 9, 1, -1], [5, 6, 7, 8]])
    np.testing.assert_allclose(recall_at_k(found, truth, 4, per_query=True), [0.5, 1.0])
    assert lower_bound(np.array([1.0, 1.0, 1.0])) == 1.0
    assert lower_bound(np.array([0.0, 1.0])) < 0.5


def test_tune_finds_smallest_param_on_a_monotone_curve():
    truth = np.tile(np.arange(10), (50, 1))
    # Recall of param p is min(1, p/20): the first p reaching 0.8 is 16.
    search = lambda p: np.where(np.arange(10)[None, :] < min(10, p // 2), truth, -1)
    res = tune(search, truth, 10, 0.8, 1, 512)
    assert res.param == 16
    assert [p for p, _, _ in res.curve][:5] == [1, 2, 4, 8, 16]  # doubling, then no bisection needed
    assert tune(search, truth, 10, 1.0, 1, 8).param is None  # unreachable within the limit


def test_tuned_oversample_holds_on_held_out_queries():
    rng = np.random.default_rng(7)
    base = clustered(rng, 6000)
    tune_q, held_q = clustered(rng, 200), clustered(rng, 200)
    index = vecsift.BinaryIndex(64)
    index.add(base)
    k, target = 10, 0.9
    truth_t = vecsift.exact_search(base, tune_q, k, "ip")[0]
    res = tune(lambda p: bq_rescore_search(index, base, tune_q, k, p, "ip"), truth_t, k, target, 1, 256)
    assert res.param is not None and res.param > 1
    truth_h = vecsift.exact_search(base, held_q, k, "ip")[0]
    held = recall_at_k(bq_rescore_search(index, base, held_q, k, res.param, "ip"), truth_h, k, per_query=True).mean()
    assert held >= target
    # And it is the smallest: one less misses the (conservative) target on the tuning set.
    below = recall_at_k(bq_rescore_search(index, base, tune_q, k, res.param - 1, "ip"), truth_t, k, per_query=True)
    assert lower_bound(below) < target


def test_tune_rejects_bad_arguments():
    with pytest.raises(ValueError, match="target recall"):
        tune(lambda p: None, np.zeros((1, 1)), 1, 1.5, 1, 2)
    with pytest.raises(ValueError, match="range"):
        tune(lambda p: None, np.zeros((1, 1)), 1, 0.9, 5, 2)
