import threading

import numpy as np
import pytest
from pyroaring import BitMap, FrozenBitMap

import vecsift
from vecsift import _core

from conftest import DIMS, hamming_matrix, topk_ref


@pytest.mark.parametrize("d", DIMS)
def test_quantize_matches_packbits(level, rng, d):
    x = rng.standard_normal((101, d)).astype(np.float32)
    x[0, : min(d, 5)] = 0.0  # zero is not positive
    x[1, :] = -0.0
    ref = np.packbits(x > 0, axis=1, bitorder="little")
    np.testing.assert_array_equal(_core.binary_quantize(x, level), ref)
    assert vecsift.binary_quantize(x).shape == (101, (d + 7) // 8)


@pytest.mark.parametrize("width", [1, 5, 8, 13, 48, 64, 65, 128, 192])
def test_hamming_rows_match_numpy(level, rng, width):
    a = rng.integers(0, 256, (300, width), dtype=np.uint8)
    b = rng.integers(0, 256, (300, width), dtype=np.uint8)
    ref = np.unpackbits(a ^ b, axis=1).sum(1)
    np.testing.assert_array_equal(_core.hamming_rows(a, b, level), ref)


@pytest.mark.parametrize("d", DIMS)
def test_binary_index_topk_equals_reference(level, rng, d):
    n = 1003  # not a multiple of the 8-row block
    x = rng.standard_normal((n, d)).astype(np.float32)
    q = rng.standard_normal((9, d)).astype(np.float32)
    index = vecsift.BinaryIndex(d)
    index.add(x)
    k = 17
    codes, qcodes = vecsift.binary_quantize(x), vecsift.binary_quantize(q)
    ref_ids, ref_d = topk_ref(hamming_matrix(qcodes, codes), k)
    for threads in (1, 2):
        ids, dist = index._index.search_codes(qcodes, k, None, None, threads, level)
        np.testing.assert_array_equal(dist, ref_d)
        np.testing.assert_array_equal(ids, ref_ids)  # ties by smaller id


def test_batch_and_single_query_agree(rng):
    # Few random bits make many ties: exercises tie-breaking across row slices.
    codes = rng.integers(0, 4, (5000, 16), dtype=np.uint8)
    index = vecsift.BinaryIndex(128)
    index.add(codes)
    q = rng.integers(0, 4, (40, 16), dtype=np.uint8)
    batch_ids, batch_d = index.search(q, 25, threads=2)
    ref_ids, ref_d = topk_ref(hamming_matrix(q, codes), 25)
    np.testing.assert_array_equal(batch_ids, ref_ids)
    for i in range(0, 40, 7):
        ids, dist = index.search(q[i], 25, threads=2)
        np.testing.assert_array_equal(ids[0], ref_ids[i])
        np.testing.assert_array_equal(dist[0], ref_d[i])


def test_codes_and_float_inputs_are_equivalent(rng):
    x = rng.standard_normal((500, 70)).astype(np.float32)
    a, b = vecsift.BinaryIndex(70), vecsift.BinaryIndex(70)
    a.add(x)
    b.add(vecsift.binary_quantize(x))
    np.testing.assert_array_equal(a.codes(), b.codes())
    np.testing.assert_array_equal(a.codes(), np.packbits(x > 0, axis=1, bitorder="little"))
    ra, rb = a.search(x[:5], 10), b.search(vecsift.binary_quantize(x[:5]), 10)
    np.testing.assert_array_equal(ra[0], rb[0])
    assert len(a) == 500 and a.dim == 70 and a.code_bytes == 9 and a.nbytes >= 500 * 9


def test_incremental_add_continues_ids(rng):
    x = rng.standard_normal((300, 32)).astype(np.float32)
    index = vecsift.BinaryIndex(32)
    for part in np.array_split(x, 7):
        index.add(part)
    ref_ids, _ = topk_ref(hamming_matrix(vecsift.binary_quantize(x[:4]), vecsift.binary_quantize(x)), 5)
    np.testing.assert_array_equal(index.search(x[:4], 5)[0], ref_ids)


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
@pytest.mark.parametrize("form", ["mask", "ids", "bitmap", "frozen"])
def test_allow_filters(rng, density, form, level):
    n, d, k = 2000, 96, 10
    x = rng.standard_normal((n, d)).astype(np.float32)
    q = rng.standard_normal((6, d)).astype(np.float32)
    mask = rng.random(n) < density
    allowed = np.flatnonzero(mask)
    allow = {"mask": mask, "ids": allowed, "bitmap": BitMap(allowed.tolist()),
             "frozen": FrozenBitMap(allowed.tolist())}[form]
    index = vecsift.BinaryIndex(d)
    index.add(x)
    keys = hamming_matrix(vecsift.binary_quantize(q), vecsift.binary_quantize(x))
    keys[:, ~mask] = np.iinfo(np.int64).max  # disallowed rows sort last
    ref_ids, ref_d = topk_ref(keys, k)
    from vecsift.allow import allow_arrays
    m, i = allow_arrays(allow, n)
    ids, dist = index._index.search_codes(vecsift.binary_quantize(q), k, m, i, 0, level)
    found = min(k, allowed.size)
    np.testing.assert_array_equal(ids[:, :found], ref_ids[:, :found])
    np.testing.assert_array_equal(dist[:, :found], ref_d[:, :found])
    # Padding where fewer than k rows are allowed.
    assert (ids[:, found:] == -1).all() and (dist[:, found:] == np.iinfo(np.int32).max).all()
    assert np.isin(ids[:, :found], allowed).all()


def test_empty_index_returns_padding():
    index = vecsift.BinaryIndex(64)
    ids, dist = index.search(np.ones((3, 64), np.float32), 4)
    assert ids.shape == (3, 4) and (ids == -1).all()
    assert (dist == np.iinfo(np.int32).max).all()


def test_bad_input_is_rejected_clearly(rng):
    index = vecsift.BinaryIndex(16)
    with pytest.raises(ValueError, match="dimension 8"):
        index.add(np.ones((2, 8), np.float32))
    with pytest.raises(ValueError, match="width 3"):
        index.add(np.ones((2, 3), np.uint8))
    with pytest.raises(TypeError, match="numeric"):
        index.add(np.array([["a"] * 16]))
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.full((1, 16), np.nan, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.full((1, 16), np.inf, np.float64))
    assert len(index) == 0  # nothing half-added
    index.add(rng.standard_normal((10, 16)))
    for k in (0, -3):
        with pytest.raises(ValueError, match="k must be positive"):
            index.search(np.ones(16, np.float32), k)
    with pytest.raises(TypeError, match="k must be an integer"):
        index.search(np.ones(16, np.float32), 2.5)
    with pytest.raises(ValueError, match="allow mask has length 3"):
        index.search(np.ones(16, np.float32), 2, allow=np.ones(3, bool))
    with pytest.raises(ValueError, match="outside"):
        index.search(np.ones(16, np.float32), 2, allow=np.array([0, 10]))
    with pytest.raises(ValueError, match="row id 99"):
        index.search(np.ones(16, np.float32), 2, allow=BitMap([1, 99]))
    with pytest.raises(ValueError, match="dim must be"):
        vecsift.BinaryIndex(0)


def test_non_contiguous_and_other_dtypes_are_converted(rng):
    x = rng.standard_normal((200, 64))
    index = vecsift.BinaryIndex(32)
    index.add(x[:, ::2])  # float64, strided
    np.testing.assert_array_equal(index.codes(), np.packbits(x[:, ::2] > 0, axis=1, bitorder="little"))
    index2 = vecsift.BinaryIndex(32)
    index2.add(np.asfortranarray(x[:, :32].astype(np.float32)))
    np.testing.assert_array_equal(index2.codes(), np.packbits(x[:, :32] > 0, axis=1, bitorder="little"))


def test_search_releases_the_gil_and_is_thread_safe(rng):
    x = rng.standard_normal((20000, 256)).astype(np.float32)
    index = vecsift.BinaryIndex(256)
    index.add(x)
    expected = index.search(x[:8], 10, threads=1)
    results, errors = [], []

    def worker():
        try:
            for _ in range(5):
                results.append(index.search(x[:8], 10, threads=1))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for ids, dist in results:
        np.testing.assert_array_equal(ids, expected[0])
        np.testing.assert_array_equal(dist, expected[1])
