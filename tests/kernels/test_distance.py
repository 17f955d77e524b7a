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
