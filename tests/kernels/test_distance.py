import numpy as np
import pytest

from vecsift import _core

from conftest import DIMS


@pytest.mark.parametrize("d", DIMS)
def test_ip_and_l2_match_numpy(level, rng, d):
    rows = rng.standard_normal((257, d)).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    r64, q64 = rows.astype(np.float64), q.astype(np.float64)
    tol = 1e-5 * max(1.0, d ** 0.5) * 4
    ip = _core.distances(q, rows, "ip", level)
    np.testing.assert_allclose(ip, r64 @ q64, rtol=1e-4, atol=tol)
    l2 = _core.distances(q, rows, "l2sq", level)
    np.testing.assert_allclose(l2, ((r64 - q64) ** 2).sum(1), rtol=1e-4, atol=tol)


@pytest.mark.parametrize("d", [3, 17, 33])
def test_levels_agree_on_integer_data_exactly(level, rng, d):
    # Small integers are exact in float32, so every level must agree bit for bit.
    rows = rng.integers(-8, 9, (64, d)).astype(np.float32)
    q = rng.integers(-8, 9, d).astype(np.float32)
    np.testing.assert_array_equal(_core.distances(q, rows, "ip", level), rows @ q)
    np.testing.assert_array_equal(_core.distances(q, rows, "l2sq", level), ((rows - q) ** 2).sum(1))


def test_all_finite_detects_nan_and_inf():
    x = np.zeros(1001, np.float32)
    assert _core.all_finite(x)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[777] = bad
        assert not _core.all_finite(y)


def test_unit_rows_matches_numpy(rng):
    x = rng.standard_normal((50, 384)).astype(np.float32) * 3
    x[7] = 0  # a zero row stays zero
    x[9] = 0
    x[9, 5] = -2.5  # one nonzero value: exactly -1
    got = _core.unit_rows(x)
    norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    norms[norms == 0] = 1
    np.testing.assert_allclose(got, x / norms, rtol=2e-7, atol=1e-8)
    assert (got[7] == 0).all() and got[9, 5] == -1.0 and np.count_nonzero(got[9]) == 1
    np.testing.assert_allclose(np.linalg.norm(got[np.arange(50) != 7], axis=1), 1.0, rtol=1e-6)
    assert got.dtype == np.float32 and not np.shares_memory(got, x)
    with pytest.raises(ValueError, match="2-d"):
        _core.unit_rows(x[0])
