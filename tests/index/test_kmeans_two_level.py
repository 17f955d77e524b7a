"""Two-level (hierarchical) k-means for large IVF indexes: the lists partition
into coarse cells, assignment among a row's top cells equals the flat
assignment when every cell is searched, IVFIndex built with it keeps recall
against exact search, files stay the same format, and the fast encoder gives
the portable encoder's codes bit for bit."""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import vecsift
from vecsift import IVFIndex
from vecsift.eval import recall_at_k
from vecsift.index import kmeans

DIM = 64


def clustered(n, nq, dim=DIM, centres=120, spread=0.6, seed=3):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    q = c[rng.integers(0, centres, nq)] + spread * rng.standard_normal((nq, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.ascontiguousarray(x, np.float32), np.ascontiguousarray(q, np.float32)


@pytest.fixture(scope="module")
def data():
    return clustered(20_000, 60)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_groups_partition_the_lists_and_full_search_equals_flat(data, metric):
    x, _ = data
    c, (cc, first) = kmeans.train_two_level(x, 256, metric, sample_per_list=32, seed=1)
    assert c.shape == (256, DIM) and c.dtype == np.float32 and np.isfinite(c).all()
    assert first[0] == 0 and first[-1] == 256 and (np.diff(first) >= 1).all()
    assert cc.shape == (len(first) - 1, DIM) == (kmeans.default_coarse(256), DIM)
    if metric == "cosine":
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0, atol=1e-5)
    flat = kmeans.assign(x, c, metric)
    # Searching every coarse cell is the flat assignment (up to exact score ties).
    full = kmeans.assign_two_level(x, c, (cc, first), metric, top=len(cc), step=3000)
    assert (full == flat).mean() > 0.9995
    top3 = kmeans.assign_two_level(x, c, (cc, first), metric, top=3, step=4096)
    assert (top3 == flat).mean() > 0.9
    # The chosen list is the best of the lists of the row's 3 nearest cells (numpy reference).
    sc = x[:500] @ cc.T - (0.5 * (cc * cc).sum(1) if metric == "l2" else 0)
    tc = np.argsort(-sc, axis=1)[:, :3]
    s = x[:500] @ c.T - (0.5 * (c * c).sum(1) if metric == "l2" else 0)
    owner = np.repeat(np.arange(len(cc)), np.diff(first))
    s[~(owner[None, :] == tc[:, :, None]).any(1)] = -np.inf
    np.testing.assert_array_equal(top3[:500], np.argmax(s, axis=1))


def test_split_counts_are_proportional_and_capped():
    k = kmeans._split_counts(np.array([0, 1, 50, 49, 900]), 100, np.array([1, 1, 50, 49, 900]))
    assert k.sum() == 100 and k.min() >= 1 and (k <= [1, 1, 50, 49, 900]).all()
    assert k[4] > 80


def test_two_level_index_keeps_recall_and_files_round_trip(data, tmp_path):
    x, q = data
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    flat = IVFIndex.build(x, nlist=128, method="flat")
    two = IVFIndex.build(x, nlist=128, method="two_level", coarse=8, assign_top=2)
    assert two.balance()["empty"] == 0 and two.list_sizes().sum() == len(x)
    rf = recall_at_k(flat.search(q, 10, nprobe=16)[0], gt, 10)
    r2 = recall_at_k(two.search(q, 10, nprobe=16)[0], gt, 10)
    assert r2 >= 0.9 and r2 >= rf - 0.05
    assert set(two.build_times) >= {"assign_s", "encode_s", "layout_s"}
    path = tmp_path / "two.ivf"
    two.save(path)
    back = IVFIndex.open(path)
    a, b = two.search(q, 10, nprobe=16), back.search(q, 10, nprobe=16)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert vecsift.index.partitioned.describe(path)["format"] == 3


def test_auto_method_and_bad_arguments(data):
    x, _ = data
    with pytest.raises(ValueError, match="method"):
        IVFIndex(DIM, 16).train(x, method="tree")
    with pytest.raises(ValueError, match="assign_top"):
        IVFIndex(DIM, 16).train(x, method="two_level", assign_top=0)
    with pytest.raises(ValueError, match="coarse"):
        IVFIndex(DIM, 16).train(x, method="two_level", coarse=-1)
    small = IVFIndex(DIM, 16).train(x[:4000])
    assert small._groups is None  # below TWO_LEVEL_MIN_NLIST: flat
    two = IVFIndex(DIM, 16).train(x[:4000], method="two_level")
    assert two._groups is not None and two._groups[1][-1] == 16


_ENCODE = (
    "import sys, hashlib, numpy as np, vecsift\n"
    "from vecsift import _core\n"
    "rng = np.random.default_rng(5)\n"
    "x = rng.standard_normal((3000, 72)).astype(np.float32) * rng.uniform(0.01, 3, (3000, 1)).astype(np.float32)\n"
    "c = rng.standard_normal((4, 72)).astype(np.float32)\n"
    "x[0] = c[1]; x[1] = 0\n"
    "co = rng.integers(0, 4, 3000).astype(np.int64); co[0] = 1\n"
    "h = hashlib.sha256()\n"
    "for D, kind in ((128, 'dense'), (192, 'dense'), (128, 'fht'), (192, 'fht')):\n"
    "    rot = _core.ivf_quant_rotation(D, 3, kind)\n"
    "    for bits in (1, 2, 4, 8):\n"
    "        for metric in ('cosine', 'l2', 'ip'):\n"
    "            p, f = _core.ivf_quant_encode(rot, c, x, co, metric, bits)\n"
    "            h.update(p.tobytes()); h.update(f.tobytes())\n"
    "print(vecsift.cpu_features()['level'], h.hexdigest())\n"
)


def test_fast_encoder_gives_the_portable_codes():
    outs = {}
    for value in ("scalar", "avx2", "avx512"):
        r = subprocess.run([sys.executable, "-c", _ENCODE], env=dict(os.environ, VECSIFT_SIMD=value),
                           capture_output=True, text=True, check=True)
        level, digest = r.stdout.split()
        outs[level] = digest
    assert "scalar" in outs
    assert len(set(outs.values())) == 1, outs
