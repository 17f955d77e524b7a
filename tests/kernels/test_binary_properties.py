"""Property tests (hypothesis): quantisation and Hamming kernels on arbitrary shapes and values."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import vecsift
from vecsift import _core

from conftest import HW_LEVELS, hamming_matrix, topk_ref

finite = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 200), st.data())
def test_quantize_equals_packbits_for_any_shape(n, d, data):
    x = data.draw(arrays(np.float32, (n, d), elements=finite))
    ref = np.packbits(x > 0, axis=1, bitorder="little")
    for level in HW_LEVELS:
        np.testing.assert_array_equal(_core.binary_quantize(x, level), ref)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40), st.integers(1, 30), st.data())
def test_hamming_topk_equals_reference(n, width, k, data):
    codes = data.draw(arrays(np.uint8, (n, width)))
    q = data.draw(arrays(np.uint8, (3, width)))
    index = vecsift.BinaryIndex(width * 8)
    index.add(codes)
    ref_ids, ref_d = topk_ref(hamming_matrix(q, codes), min(k, n))
    for level in HW_LEVELS:
        ids, dist = index._index.search_codes(q, k, None, None, 0, level)
        np.testing.assert_array_equal(ids[:, : min(k, n)], ref_ids)
        np.testing.assert_array_equal(dist[:, : min(k, n)], ref_d)
        assert (ids[:, n:] == -1).all()
