"""read_probe is dispatched like every kernel: the scalar path gives the AVX2 path's answer, and
VECSIFT_SIMD=scalar runs it without AVX2 instructions."""
import os
import subprocess
import sys

import numpy as np
import pytest

from vecsift import _core


@pytest.mark.parametrize("n", [0, 1, 127, 128, 1000, 4099])
def test_levels_agree(n):
    rng = np.random.default_rng(n)
    a = np.zeros(n, np.uint8)
    assert _core.read_probe(a, level=0) == _core.read_probe(a) == 0
    if n:
        a[rng.integers(0, n)] = 1 << rng.integers(0, 8)
        assert (_core.read_probe(a, level=0) != 0) and (_core.read_probe(a, level=1) != 0)


def test_scalar_cap_in_a_subprocess():
    code = ("import numpy as np, vecsift\nfrom vecsift import _core\n"
            "a = np.zeros(1 << 20, np.uint8); a[12345] = 4\n"
            "print(vecsift.cpu_features()['level'], _core.read_probe(a) != 0)")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, VECSIFT_SIMD="scalar"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["scalar", "True"]
