"""Quantised-code kernels against numpy, exactly, at every SIMD level this CPU runs."""
import numpy as np
import pytest

import vecsift
from vecsift import _core
from tests.conftest import HW_LEVELS, LEVEL_NAMES


def unpack_planes(planes, bits, code_dim):
    """Row-major planes (n, bits*code_dim/8) -> code values u (n, code_dim)."""
    n = planes.shape[0]
    p = planes.reshape(n, bits, code_dim // 8)
    bitsarr = np.unpackbits(p, axis=2, bitorder="little").astype(np.uint32)  # (n, bits, code_dim)
    return (bitsarr << np.arange(bits, dtype=np.uint32)[None, :, None]).sum(axis=1)


def estimate_ref(S, factors, qs):
    """The estimate, with the same float32 operations in the same order as the core."""
    f32 = np.float32
    a, su, add = factors[:, 0], factors[:, 1], factors[:, 2]
    t1 = f32(qs["dq"]) * S.astype(f32)
    t2 = f32(qs["lo"]) * su
    t3 = (t1 + t2) - f32(qs["K"])
    t4 = a * t3
    return f32(qs["mq"]) * t4 + (add + f32(qs["cq"]))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("qbits", [1, 3, 4, 5, 8])
@pytest.mark.parametrize("D,n", [(64, 1), (128, 31), (448, 33), (512, 100)])
def test_plane_sums_equal_numpy(bits, qbits, D, n, rng):
    u = rng.integers(0, 2**bits, size=(n, D), dtype=np.uint8)
    qu = rng.integers(0, 2**qbits, size=D, dtype=np.uint8)
    ref = u.astype(np.int64) @ qu.astype(np.int64)
    for level in HW_LEVELS:
        got = _core.quant_plane_sums(u, qu, bits, qbits, level)
        np.testing.assert_array_equal(got, ref, err_msg=LEVEL_NAMES[level])


@pytest.mark.parametrize("qbits", range(1, 9))
@pytest.mark.parametrize("D,n", [(64, 1), (128, 31), (448, 33), (448, 70), (512, 100), (512, 300)])
@pytest.mark.parametrize("layout", ["nibbles", "pairs"])
def test_layout_sums_equal_numpy(layout, qbits, D, n, rng):
    # 4-bit codes in the nibble layout (quant_layout.hpp): a byte multiply-add, not tables. 1-bit codes
    # in the pair layout (the VBMI kernel where the CPU has it): odd and even block counts, and the
    # binding scans two ranges split at an odd block, so a pair straddles them.
    bits = 4 if layout == "nibbles" else 1
    u = rng.integers(0, 2**bits, size=(n, D), dtype=np.uint8)
    qu = rng.integers(0, 2**qbits, size=D, dtype=np.uint8)
    ref = u.astype(np.int64) @ qu.astype(np.int64)
    for level in HW_LEVELS:
        got = _core.quant_plane_sums(u, qu, bits, qbits, level, **{layout: True})
        np.testing.assert_array_equal(got, ref, err_msg=LEVEL_NAMES[level])


def test_pair_sums_skip_rows_outside_allow(rng):
    n, D = 300, 256
    u = rng.integers(0, 2, size=(n, D), dtype=np.uint8)
    qu = rng.integers(0, 16, size=D, dtype=np.uint8)
    nblocks = (n + 31) // 32
    allow = rng.integers(0, 2**32, size=nblocks, dtype=np.uint64).astype(np.uint32)
    allow[2] = allow[3] = 0  # a whole pair filtered out
    allow[4] = 0  # the first block of a pair only
    allow[7] = 0  # the second only
    keep = np.unpackbits(allow.view(np.uint8), bitorder="little")[:n].astype(bool)
    ref = np.where(keep, u.astype(np.int64) @ qu.astype(np.int64), 0)
    for level in HW_LEVELS:
        got = _core.quant_plane_sums(u, qu, 1, 4, level, pairs=True, allow=allow)
        np.testing.assert_array_equal(got, ref, err_msg=LEVEL_NAMES[level])


def test_pair_layout_is_one_bit_only(rng):
    u = rng.integers(0, 4, size=(3, 64), dtype=np.uint8)
    with pytest.raises(ValueError, match="1-bit codes only"):
        _core.quant_plane_sums(u, np.zeros(64, np.uint8), 2, 4, pairs=True)


def test_nibble_layout_is_four_bits_only(rng):
    u = rng.integers(0, 4, size=(3, 64), dtype=np.uint8)
    with pytest.raises(ValueError, match="4-bit codes only"):
        _core.quant_plane_sums(u, np.zeros(64, np.uint8), 2, 8, nibbles=True)


@pytest.mark.parametrize("bits,qbits,nibbles,pairs", [(8, 8, False, False), (1, 4, False, False),
                                                      (4, 8, False, False), (4, 8, True, False),
                                                      (4, 6, True, False), (4, 7, True, False),
                                                      (1, 4, False, True), (1, 8, False, True)])
def test_plane_sums_largest_values_do_not_overflow(bits, qbits, nibbles, pairs):
    # Every value at its maximum at the largest dimension: the u8 and u16 counters are at their limits
    # (in the nibble kernel the 16-bit lanes hold 2 words at 7-8 query bits, 8 words below).
    D = 4096
    u = np.full((40, D), 2**bits - 1, dtype=np.uint8)
    qu = np.full(D, 2**qbits - 1, dtype=np.uint8)
    for level in HW_LEVELS:
        got = _core.quant_plane_sums(u, qu, bits, qbits, level, nibbles=nibbles, pairs=pairs)
        assert (got == D * (2**bits - 1) * (2**qbits - 1)).all(), LEVEL_NAMES[level]


@pytest.mark.parametrize("d", [64, 192])
def test_rotation_equals_numpy_axpy_and_is_orthogonal(d, rng):
    ix = vecsift.QuantizedIndex(d, bits=1, code_dim=d, rotation="dense")
    cols = ix._index.rotation()
    np.testing.assert_allclose(cols @ cols.T, np.eye(d), atol=1e-5)
    x = rng.standard_normal((5, d)).astype(np.float32)
    ref = np.zeros_like(x)
    for i in range(d):  # the core's order of summation: y += x_i * column_i, no fused multiply-add
        ref = ref + x[:, i:i + 1] * cols[i][None, :]
    for level in HW_LEVELS:
        np.testing.assert_array_equal(_core.quant_rotate(cols, x, level), ref, err_msg=LEVEL_NAMES[level])


@pytest.mark.parametrize("rotation", ["dense", "fht"])
def test_rotation_is_seeded(rotation):
    a = vecsift.QuantizedIndex(64, seed=3, rotation=rotation)._index.rotation()
    b = vecsift.QuantizedIndex(64, seed=3, rotation=rotation)._index.rotation()
    c = vecsift.QuantizedIndex(64, seed=4, rotation=rotation)._index.rotation()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def fht_rotate_ref(signs, x):
    """numpy float32 reference of the structured rotation (quant_rotation.hpp), the same operations in order."""
    d = x.shape[1]
    T = 1 << (d.bit_length() - 1)
    scale, c, H = np.float32(1 / np.sqrt(T)), np.float32(np.sqrt(0.5)), d // 2
    y = x.astype(np.float32).copy()
    for r, s in enumerate(signs):
        y = y * s
        lo = 0 if r % 2 == 0 else d - T
        w = y[:, lo:lo + T].copy()
        h = 1
        while h < T:
            v = w.reshape(len(w), -1, 2, h)
            a, b = v[:, :, 0, :].copy(), v[:, :, 1, :].copy()
            v[:, :, 0, :], v[:, :, 1, :] = a + b, a - b
            w = v.reshape(len(w), T)
            h *= 2
        y[:, lo:lo + T] = w * scale
        if T == d:
            continue
        a, b = y[:, :H].copy(), y[:, H:2 * H].copy()
        y[:, :H], y[:, H:2 * H] = (a + b) * c, (a - b) * c
    return y


@pytest.mark.parametrize("d", [64, 192, 448, 512])
def test_fht_rotation_equals_numpy_and_is_orthogonal(d, rng):
    ix = vecsift.QuantizedIndex(d, bits=1, code_dim=d, rotation="fht")
    signs = ix._index.rotation()
    assert signs.shape == (_core.QUANT_FHT_ROUNDS, d) and set(np.unique(signs)) == {-1.0, 1.0}
    x = rng.standard_normal((5, d)).astype(np.float32)
    ref = fht_rotate_ref(signs, x)
    for level in HW_LEVELS:
        np.testing.assert_array_equal(_core.quant_fht_rotate(signs, x, level), ref, err_msg=LEVEL_NAMES[level])
    m = _core.quant_fht_rotate(signs, np.eye(d, dtype=np.float32))  # row i = image of e_i
    np.testing.assert_allclose(m @ m.T, np.eye(d), atol=1e-5)
    # it spreads: no coordinate of the image of a basis vector keeps a quarter of its energy
    # (the recall it buys is measured by bench/bench_quantised.py against the dense matrix)
    assert np.abs(m).max() < 0.5


def test_fht_rotation_bad_arguments():
    with pytest.raises(ValueError, match="signs"):
        _core.quant_fht_rotate(np.ones((3, 64), np.float32), np.ones((1, 64), np.float32))
    with pytest.raises(ValueError, match="columns"):
        _core.quant_fht_rotate(np.ones((_core.QUANT_FHT_ROUNDS, 64), np.float32), np.ones((1, 128), np.float32))
    with pytest.raises(ValueError, match="rotation"):
        vecsift.QuantizedIndex(64, rotation="haar")


@pytest.mark.parametrize("bits,qbits,metric",
                         [(1, 4, "cosine"), (2, 5, "ip"), (4, 8, "l2"), (4, 5, "ip"), (8, 6, "cosine")])
def test_search_equals_numpy_reference_at_every_level(bits, qbits, metric, rng):
    dim, n, k = 70, 203, 9
    x = rng.standard_normal((n, dim)).astype(np.float32)
    q = rng.standard_normal((4, dim)).astype(np.float32)
    ix = vecsift.QuantizedIndex(dim, bits=bits, metric=metric, query_bits=qbits)
    ix.add(x)
    u = unpack_planes(ix._index.planes(), bits, ix.code_dim)
    assert u.max() < 2**bits
    factors = ix._index.factors()
    results = []
    for level in HW_LEVELS:
        ids, scores = ix._index.search(q, k, qbits, None, None, 1, level)
        results.append((ids, scores))
        for i in range(len(q)):
            qs = ix._index.query_state(q[i], qbits, level)
            S = u.astype(np.int64) @ qs["qu"].astype(np.int64)
            est = estimate_ref(S, factors, qs)
            order = np.lexsort((np.arange(n), -est))[:k]
            np.testing.assert_array_equal(ids[i], order, err_msg=LEVEL_NAMES[level])
            np.testing.assert_array_equal(scores[i], est[order], err_msg=LEVEL_NAMES[level])
    for ids, scores in results[1:]:
        np.testing.assert_array_equal(ids, results[0][0])
        np.testing.assert_array_equal(scores, results[0][1])


def test_codes_are_equal_across_levels(rng):
    x = rng.standard_normal((100, 300)).astype(np.float32)
    planes = []
    for level in HW_LEVELS:
        ix = vecsift.QuantizedIndex(300, bits=4)
        ix._index.add(x, 1, level)
        planes.append((ix._index.planes(), ix._index.factors()))
    for p, f in planes[1:]:
        np.testing.assert_array_equal(p, planes[0][0])
        np.testing.assert_array_equal(f, planes[0][1])


def test_one_bit_codes_are_signs_of_the_rotated_centred_vector(rng):
    x = rng.standard_normal((50, 64)).astype(np.float32)
    ix = vecsift.QuantizedIndex(64, bits=1, metric="ip", code_dim=64, rotation="dense")
    ix.add(x)
    c = ix._index.centroid()
    np.testing.assert_allclose(c, x.mean(axis=0), atol=1e-6)
    r = (x - c) @ ix._index.rotation()
    u = unpack_planes(ix._index.planes(), 1, 64)
    np.testing.assert_array_equal(u, (r > 0).astype(np.uint32))


def test_one_bit_codes_are_signs_of_the_fht_rotated_centred_vector(rng):
    x = rng.standard_normal((50, 100)).astype(np.float32)
    for level in HW_LEVELS:
        ix = vecsift.QuantizedIndex(100, bits=1, metric="ip", code_dim=192, rotation="fht")
        ix._index.add(x, 1, level)
        pad = np.zeros((50, 192), np.float32)
        pad[:, :100] = x - ix._index.centroid()[:100]
        r = fht_rotate_ref(ix._index.rotation(), pad)
        u = unpack_planes(ix._index.planes(), 1, 192)
        np.testing.assert_array_equal(u, (r > 0).astype(np.uint32), err_msg=LEVEL_NAMES[level])
