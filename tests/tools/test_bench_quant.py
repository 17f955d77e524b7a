"""The quantised rows of `vecsift bench` (tools/bench.py _sweep_quant)."""
import json

import numpy as np

from vecsift.tools import cli


def test_bench_quant_rows(tmp_path):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 64)).astype(np.float32)
    x = centers[rng.integers(0, 20, 3000)] + 0.8 * rng.standard_normal((3000, 64)).astype(np.float32)
    np.save(tmp_path / "v.npy", x)
    out = tmp_path / "out"
    rc = cli.main(["bench", "--dataset", str(tmp_path / "v.npy"), "--queries", "50", "--index", "quant",
                   "--out", str(out), "--quiet"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    ours = {r["param"]: r for r in res["results"] if r["index"] == "vecsift-quant"}
    assert set(ours) == {"b1 q4 x4", "b2 q4 x2", "b4 q8 x1", "b4 q8 x4"}
    # Rescoring 4k candidates of 4-bit codes finds nearly all of the true top 10.
    assert ours["b4 q8 x4"]["recall"] >= 0.95
    assert all(r["qps_single"] > 0 and r["bytes_per_vector"] > 0 for r in ours.values())
