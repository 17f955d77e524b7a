"""QuantizedIndex batch calls: a batch gives what its queries give one call at a time.

1- and 2-bit batches at AVX-512 scan several queries per pass over a block (quant_scan.hpp,
quant_sums_queries); every other case scans query by query. Either way each query's ids and scores
must equal its single-query call (unscreened: the screen of 2-bit single queries is approximate),
at every kernel level.
"""
import numpy as np
import pytest

import vecsift
from tests.index.test_quantised import clustered


def _single(ix, q, k, qbits, mask=None, level=-1):
    out = [ix._index.search(v[None], k, qbits, mask, None, 1, level, screen=0.0) for v in q]
    return np.vstack([o[0] for o in out]), np.vstack([o[1] for o in out])


@pytest.mark.parametrize("nq", [2, 3, 4, 5, 9])
@pytest.mark.parametrize("bits,qbits", [(1, 4), (1, 5), (1, 8), (2, 4)])
def test_batch_equals_single_queries(nq, bits, qbits, level, rng):
    x = clustered(rng, 2000, 200)
    q = clustered(rng, nq, 200)
    ix = vecsift.QuantizedIndex(200, bits=bits, seed=5)
    ix.add(x)
    ids, scores = ix._index.search(q, 25, qbits, None, None, 1, level, screen=0.0)[:2]
    one_ids, one_scores = _single(ix, q, 25, qbits, level=level)
    np.testing.assert_array_equal(ids, one_ids)
    np.testing.assert_array_equal(scores, one_scores)
    # and the same integers at every level: the scalar scan of the same batch
    ref_ids, ref_scores = ix._index.search(q, 25, qbits, None, None, 1, 0, screen=0.0)[:2]
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(scores, ref_scores)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bits", [1, 2])
def test_batch_with_allow_mask_and_large_batches(bits, threads, level, rng):
    # 300 queries: more than the batch size whose tables are built up front (256; 64 in the 1-bit
    # pair layout, which builds them 64 queries at a time), so groups build their own; the allow mask
    # leaves some blocks empty and fewer rows than k in others.
    x = clustered(rng, 3000, 130)
    q = clustered(rng, 300, 130)
    ix = vecsift.QuantizedIndex(130, bits=bits, seed=2)
    ix.add(x)
    mask = np.zeros(len(x), np.uint8)
    mask[rng.choice(len(x), 40, replace=False)] = 1
    mask[1024:1600] = rng.random(576) < 0.5
    for k in (10, 400):
        ids, scores = ix._index.search(q, k, 4, mask, None, threads, level)[:2]
        one_ids, one_scores = _single(ix, q, k, 4, mask, level=level)
        np.testing.assert_array_equal(ids, one_ids)
        np.testing.assert_array_equal(scores, one_scores)
        assert mask[ids[ids >= 0]].all()
        assert ((ids >= 0).sum(axis=1) == min(k, int(mask.sum()))).all()


@pytest.mark.parametrize("bits", [1, 2])
def test_batch_reads_every_block_once_per_query(bits, rng):
    x = clustered(rng, 1000, 64)
    ix = vecsift.QuantizedIndex(64, bits=bits)
    ix.add(x)
    nblocks = -(-len(x) // 32)
    q = clustered(rng, 7, 64)
    assert ix._index.search(q, 5, 4, None, None, 1, stats=True)[2] == 7 * nblocks
