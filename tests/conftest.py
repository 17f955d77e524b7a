import numpy as np
import pytest

import vecsift

LEVEL_NAMES = ["scalar", "avx2", "avx512"]
# Every kernel level this CPU can run; each is compared against numpy.
HW_LEVELS = list(range(LEVEL_NAMES.index(vecsift.cpu_features()["best_level"]) + 1))
DIMS = [1, 7, 50, 64, 384, 1000, 1536]


@pytest.fixture(params=HW_LEVELS, ids=lambda l: LEVEL_NAMES[l])
def level(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def hamming_matrix(qcodes, codes):
    """Reference: popcount of XOR for every (query, row) pair."""
    x = np.bitwise_xor(qcodes[:, None, :], codes[None, :, :])
    return np.unpackbits(x, axis=2).sum(axis=2).astype(np.int64)


def topk_ref(keys, k):
    """Reference top-k of a (q, n) matrix of keys, smaller first, ties by smaller id."""
    n = keys.shape[1]
    ids = np.broadcast_to(np.arange(n), keys.shape)
    order = np.lexsort((ids, keys), axis=1)[:, :k]
    return order, np.take_along_axis(keys, order, axis=1)
