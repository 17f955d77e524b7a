"""Float16 centroids of the partitioned index: conversion bit-exact against numpy,
scores against a numpy reference at every SIMD level this CPU runs."""
import numpy as np
import pytest

from vecsift import _core
from tests.conftest import HW_LEVELS, LEVEL_NAMES


def test_conversion_rounds_like_numpy(rng):
    special = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 65519.0, 65520.0, 1e6, -1e6, 2.0**-14, 2.0**-24,
                        2.0**-25, 3 * 2.0**-26, 2.0**-26, 1e-10, 6.1e-5, 5.96e-8, np.inf, -np.inf], np.float32)
    ties = (np.arange(1, 2049, dtype=np.float32) + np.float32(0.5)) * np.float32(2.0**-10)  # exact halfway cases
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = bits[np.isfinite(bits)]
    for x in (special, ties, -ties, bits, rng.standard_normal(10_000).astype(np.float32) * 1e-5):
        with np.errstate(over="ignore"):  # numpy warns where it rounds to infinity, as it should
            want = x.astype(np.float16).view(np.uint16)
        np.testing.assert_array_equal(_core.to_half(x), want)


def test_nan_stays_nan():
    assert np.isnan(_core.to_half(np.array([np.nan], np.float32)).view(np.float16)[0])


@pytest.mark.parametrize("d", [1, 7, 16, 50, 384, 385])
def test_scores_equal_numpy(d, rng):
    rows = (rng.standard_normal((37, d)) * 0.3).astype(np.float16)
    q = rng.standard_normal(d).astype(np.float32)
    ref = rows.astype(np.float64) @ q
    for level in HW_LEVELS:
        got = _core.half_scores(q, rows.view(np.uint16), level)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(d), err_msg=LEVEL_NAMES[level])


def test_bad_shapes_are_value_errors():
    with pytest.raises(ValueError, match="rows"):
        _core.half_scores(np.ones(4, np.float32), np.ones((2, 5), np.uint16))
    with pytest.raises(ValueError, match="1-d"):
        _core.half_scores(np.ones((1, 4), np.float32), np.ones((2, 4), np.uint16))
