"""Radix selection of the m largest scores (kernels/select.hpp), which picks
the lists an IVF query probes: the same set as a numpy sort by (score
descending, index ascending), whatever the ties, signs and spreads."""
import numpy as np
import pytest

from vecsift import _core


def reference(s, m):
    order = np.lexsort((np.arange(len(s)), -s.astype(np.float64)))
    return set(order[:m].tolist())


@pytest.mark.parametrize("kind", ["normal", "narrow", "ties", "signs", "constant"])
def test_same_set_as_numpy(kind):
    rng = np.random.default_rng(len(kind))
    for n in (1, 7, 300, 8192):
        s = {"normal": rng.standard_normal(n),
             "narrow": 0.6 + 1e-6 * rng.standard_normal(n),          # one top-12-bit bucket
             "ties": rng.integers(0, 5, n) / 4.0,                       # many equal scores
             "signs": np.concatenate([[0.0, -0.0], rng.standard_normal(n)])[:n] * 1e-30,
             "constant": np.full(n, 0.25)}[kind].astype(np.float32)
        for m in sorted({0, 1, n // 3, n - 1, n}):
            order = _core.select_largest(s, m)
            assert sorted(order.tolist()) == list(range(n))      # a permutation
            assert set(order[:m].tolist()) == reference(s, m)


def test_negative_zero_ties_with_zero():
    s = np.array([1.0, -0.0, 0.0, -1.0], np.float32)
    assert set(_core.select_largest(s, 2)[:2].tolist()) == {0, 1}  # -0 == +0: the smaller index wins


def test_bad_scores_refused():
    with pytest.raises(ValueError, match="NaN"):
        _core.select_largest(np.array([1.0, np.nan], np.float32), 1)
