import os
import subprocess
import sys

import vecsift

from conftest import LEVEL_NAMES


def test_cpu_features_report_consistent_levels():
    f = vecsift.cpu_features()
    for key in ("popcnt", "avx2", "avx512f", "avx512bw", "avx512vpopcntdq", "level", "best_level"):
        assert key in f
    assert f["level"] in LEVEL_NAMES and f["best_level"] in LEVEL_NAMES
    assert LEVEL_NAMES.index(f["level"]) <= LEVEL_NAMES.index(f["best_level"])
    if f["best_level"] == "avx512":
        assert f["avx512f"] and f["avx512bw"] and f["avx512vpopcntdq"]
    if f["best_level"] != "scalar":
        assert f["avx2"] and f["popcnt"]


def _level_in_subprocess(value):
    env = dict(os.environ, VECSIFT_SIMD=value)
    out = subprocess.run([sys.executable, "-c", "import vecsift; print(vecsift.cpu_features()['level'])"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_env_var_caps_the_level():
    best = vecsift.cpu_features()["best_level"]
    for name in LEVEL_NAMES:
        got = _level_in_subprocess(name)
        # The cap never raises the level above what the CPU supports.
        assert got == LEVEL_NAMES[min(LEVEL_NAMES.index(name), LEVEL_NAMES.index(best))]


def test_unknown_env_value_keeps_best_level():
    assert _level_in_subprocess("bogus") == vecsift.cpu_features()["best_level"]


def test_scalar_cap_gives_identical_search_results():
    code = (
        "import numpy as np, vecsift\n"
        "r = np.random.default_rng(3); x = r.standard_normal((3000, 100)).astype('float32')\n"
        "i = vecsift.BinaryIndex(100); i.add(x)\n"
        "ids, d = i.search(x[:20], 10)\n"
        "print(ids.tobytes().hex(), d.tobytes().hex())\n"
    )
    outs = []
    for value in ("scalar", "avx512"):
        env = dict(os.environ, VECSIFT_SIMD=value)
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert outs[0] == outs[1]
