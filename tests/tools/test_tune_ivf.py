"""vecsift tune on an IVF file: the fastest (nprobe, oversample) pair that reaches the target."""
import numpy as np
import pytest

import vecsift
from vecsift import IVFIndex
from vecsift.eval import recall_at_k
from vecsift.index.partitioned import tuning_queries
from vecsift.tools.tune import lower_bound
from vecsift.tools.tune_ivf import tune_ivf


def _noisy(n, dim=64, seed=0):
    # near neighbours close together: 1-bit estimates need many candidates to find them
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((40, dim)).astype(np.float32)
    x = c[rng.integers(0, 40, n)] + 0.9 * rng.standard_normal((n, dim)).astype(np.float32)
    return np.ascontiguousarray(x, np.float32)


@pytest.fixture(scope="module")
def tuned():
    x = _noisy(6000)
    ix = IVFIndex.build(x, nlist=32, bits=1, nprobe=1, oversample=4)
    q, truth = tuning_queries(ix, k=10, sample=150, seed=3)
    return ix, q, truth, tune_ivf(ix, q, truth, 10, 0.95, oversamples=(1, 4, 16, 64), timing_queries=30)


def test_chosen_pair_reaches_the_target_and_is_the_fastest_found(tuned):
    ix, q, truth, res = tuned
    assert res.nprobe is not None and res.oversample in (1, 4, 16, 64)
    r = recall_at_k(ix.search(q, 10, nprobe=res.nprobe, oversample=res.oversample)[0], truth, 10, per_query=True)
    assert lower_bound(r) >= 0.95 - 1e-9
    done = [row for row in res.rows if row["nprobe"] is not None]
    assert min(done, key=lambda row: row["us"])["oversample"] == res.oversample
    # a larger oversample never needs more lists
    probes = [row["nprobe"] for row in res.rows if row["nprobe"] is not None]
    assert probes == sorted(probes, reverse=True)
    # each rung's nprobe is the smallest reaching the target at its oversample
    for row in done:
        if row["nprobe"] > 1:
            ids = ix.search(q, 10, nprobe=row["nprobe"] - 1, oversample=row["oversample"])[0]
            assert lower_bound(recall_at_k(ids, truth, 10, per_query=True)) < 0.95


def test_unreachable_target_is_reported(tuned):
    ix, q, truth, _ = tuned
    wrong = truth.copy()
    wrong[:, 0] = -5  # an id no search returns: recall 1.0 is out of reach
    res = tune_ivf(ix, q, wrong, 10, 1.0, oversamples=(1, 2), timing_queries=5)
    assert res.nprobe is None and res.oversample is None and all(r["nprobe"] is None for r in res.rows)


def test_cli_stores_both_defaults(tmp_path, capsys):
    from vecsift.tools.cli import main
    x = _noisy(4000, seed=2)
    ix = IVFIndex.build(x, nlist=16, bits=1, nprobe=1, oversample=4)
    path = tmp_path / "t.ivf"
    ix.save(path)
    assert main(["tune", str(path), "--target-recall", "0.9", "--sample", "100", "--oversamples", "2,8,32"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    nprobe = int(last.split("nprobe=")[1].split()[0])
    oversample = int(last.split("oversample=")[1].split()[0])
    back = IVFIndex.open(path)
    assert (back.nprobe, back.oversample) == (nprobe, oversample) and oversample in (2, 4, 8, 32)
    assert main(["tune", str(path), "--oversamples", "4,x"]) == 2
    assert "--oversamples" in capsys.readouterr().err
