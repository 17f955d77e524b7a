import math

import numpy as np
import pytest

from vecsift.eval import hit_at_k, mrr_at_k, ndcg_at_k, recall_at_k


def test_recall_hand_computed():
    found = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    true = np.array([[4, 3, 9, 10], [1, 2, 3, 5]])
    assert recall_at_k(found, true, 4) == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert recall_at_k(found, true, 2, per_query=True).tolist() == [0.0, 0.0]
    # padding in the truth (fewer than k rows exist) is not counted against recall
    assert recall_at_k([[1, 2, -1]], [[2, 1, -1]], 3) == 1.0
    assert recall_at_k([[1, -1, -1]], [[2, 1, -1]], 3) == 0.5


def test_hit_and_mrr_hand_computed():
    found = [[3, 1, 2], [9, 8, 7], [4, -1, -1]]
    relevant = [2, {7: 1, 8: 0}, [4, 5]]  # grade 0 does not count as relevant
    assert hit_at_k(found, relevant, 3, per_query=True).tolist() == [1.0, 1.0, 1.0]
    assert hit_at_k(found, relevant, 2, per_query=True).tolist() == [0.0, 0.0, 1.0]
    assert mrr_at_k(found, relevant, 3) == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)
    assert mrr_at_k(found, relevant, 1) == pytest.approx(1 / 3)
    assert hit_at_k(np.array([[1, 2]]), np.array([2]), 2) == 1.0


def test_ndcg_graded_hand_computed():
    found = [[10, 20, 30, 40]]
    rel = [{20: 3, 30: 1, 50: 2}]
    dcg = 3 / math.log2(3) + 1 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(found, rel, 4) == pytest.approx(dcg / idcg)
    dcg_e = 7 / math.log2(3) + 1 / math.log2(4)
    idcg_e = 7 + 3 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(found, rel, 4, gain="exponential") == pytest.approx(dcg_e / idcg_e)
    # at k=2 the ideal list is cut to two grades as well
    assert ndcg_at_k(found, rel, 2) == pytest.approx((3 / math.log2(3)) / (3 + 2 / math.log2(3)))
    assert ndcg_at_k([[20, 50, 30]], rel, 3) == pytest.approx(1.0)
    assert ndcg_at_k([[1, 2]], [{}], 2) == 0.0
    # a repeated id earns its gain once
    assert ndcg_at_k([[20, 20]], [{20: 1}], 2) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        ndcg_at_k(found, rel, 4, gain="square")


def test_single_relevant_ndcg_is_inverse_log_rank():
    found = np.array([[5, 6, 7], [6, 7, 5], [7, 6, 1]])
    vals = ndcg_at_k(found, [7, 7, 7], 3, per_query=True)
    np.testing.assert_allclose(vals, [1 / math.log2(4), 1 / math.log2(3), 1.0])


def test_argument_errors():
    with pytest.raises(ValueError):
        hit_at_k([[1]], [1, 2], 1)
    with pytest.raises(ValueError):
        hit_at_k([[1]], [1], 0)
    with pytest.raises(ValueError):
        recall_at_k(np.zeros(3, int), np.zeros(3, int), 1)
