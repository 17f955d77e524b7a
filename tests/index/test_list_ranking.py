"""Two-stage list ranking (index/list_ranking.py, partitioned_quant.hpp
rank_two_stage): the basis holds the centroids' energy, and an index ranking in
two stages probes (nearly) the lists the one-stage ranking probes: the same
top-k, the same recall, k rows under filters, and exactly the one-stage
results when the shortlist would cover half the lists."""
import os
import subprocess
import sys

import numpy as np
import pytest

import vecsift
from vecsift import IVFIndex, _core
from vecsift.eval import recall_at_k
from vecsift.index import list_ranking

DIM = 96


def anisotropic(n, nq, rank=20, seed=0):
    """Unit rows whose energy sits in a few directions (as sentence embeddings'):
    a rank-`rank` signal around a shared offset plus weak isotropic noise."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((DIM, rank)))[0].T.astype(np.float32)
    scale = np.linspace(2.0, 0.4, rank).astype(np.float32)
    z = rng.standard_normal((n + nq, rank)).astype(np.float32) * scale
    v = 1.5 * basis[0] + z @ basis + 0.12 * rng.standard_normal((n + nq, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(v[:n]), np.ascontiguousarray(v[n:])


@pytest.fixture(scope="module")
def built():
    x, q = anisotropic(40_000, 200)
    ix = IVFIndex.build(x, nlist=1024, nprobe=16, oversample=8)
    one = IVFIndex.build(x, nlist=1024, nprobe=16, oversample=8)
    one._rank = (one._centroids, None, None)  # one-stage ranking on the same lists
    one._install(one._layout, one._vectors, one._inv_norm, path=None)
    return x, q, ix, one


def test_basis_keeps_the_energy_and_projects_the_centroids(built):
    _, _, ix, _ = built
    basis, proj = ix._list_ranking()
    assert basis is not None
    r = basis.shape[0]
    assert r % list_ranking.STEP == 0 and 2 * r <= DIM and basis.shape == (r, DIM)
    np.testing.assert_allclose(basis @ basis.T, np.eye(r), atol=1e-5)
    c = np.asarray(ix.centroids)
    kept = np.linalg.norm(c @ basis.T) ** 2 / np.linalg.norm(c) ** 2
    assert kept >= list_ranking.ENERGY
    assert proj.shape == (ix.nlist, r) and proj.dtype == np.uint16
    np.testing.assert_array_equal(proj, _core.to_half(np.ascontiguousarray(c @ basis.T).ravel()).reshape(proj.shape))


def test_one_stage_kept_where_it_is_not_worth_a_basis():
    rng = np.random.default_rng(3)
    iso = rng.standard_normal((2048, DIM)).astype(np.float32)
    iso /= np.linalg.norm(iso, axis=1, keepdims=True)
    assert list_ranking.rank_basis(iso, "cosine") == (None, None)  # isotropic: r would pass dim / 2
    x, _ = anisotropic(3000, 1)
    assert list_ranking.rank_basis(x[:2048], "l2") == (None, None)
    assert list_ranking.rank_basis(x[:512], "ip") == (None, None)  # fewer than MIN_NLIST lists
    assert list_ranking.rank_basis(x[:2048], "ip")[0] is not None


def test_two_stage_probes_the_same_lists(built):
    x, q, ix, one = built
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    for nprobe in (8, 32):
        a, b = ix.search(q, 10, nprobe=nprobe), one.search(q, 10, nprobe=nprobe)
        same = np.mean([(ra == rb).all() for ra, rb in zip(a[0], b[0])])
        assert same >= 0.97
        assert recall_at_k(a[0], gt, 10) >= recall_at_k(b[0], gt, 10) - 0.005
    # With every candidate rescored, the one-stage and two-stage lists give the same rows.
    a = ix.search(q, 10, nprobe=8, oversample=10_000, rescore="fixed")[0]
    b = one.search(q, 10, nprobe=8, oversample=10_000, rescore="fixed")[0]
    assert np.mean([(ra == rb).all() for ra, rb in zip(a, b)]) >= 0.97


def test_large_nprobe_ranks_in_one_stage(built):
    _, q, ix, one = built
    nprobe = ix.nlist // 2 // 4 + 1  # the shortlist (4 nprobe) would pass half the lists
    a, b = ix.search(q, 10, nprobe=nprobe), one.search(q, 10, nprobe=nprobe)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("share", [0.003, 0.05])
def test_filters_probe_past_the_shortlist_and_keep_k_rows(built, share):
    x, q, ix, _ = built
    allow = np.random.default_rng(5).random(len(x)) < share
    ids, _ = ix.search(q, 10, nprobe=8, allow=allow, exact_small=False)
    assert (ids >= 0).all() and allow[ids].all()
    gt, _ = vecsift.exact_search(x[allow], q, 10, "cosine")
    assert recall_at_k(ids, np.flatnonzero(allow)[gt], 10) >= 0.9


def test_saved_and_opened_index_ranks_the_same(built, tmp_path):
    _, q, ix, _ = built
    ix.save(tmp_path / "r.ivf")
    back = IVFIndex.open(tmp_path / "r.ivf")
    assert back._list_ranking()[0] is not None
    np.testing.assert_array_equal(back.search(q, 10)[0], ix.search(q, 10)[0])


def test_the_shortlist_decides_which_lists_are_probed(built):
    """A basis blind to the data (the centroids' 16 weakest directions)
    shortlists the wrong lists: recall falls, so the two-stage path is the one
    searching."""
    x, q, ix, _ = built
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    c = np.asarray(ix.centroids)
    _, v = np.linalg.eigh((c.T @ c).astype(np.float64))
    blind = np.ascontiguousarray(v[:, :16].T, dtype=np.float32)
    ix._rank = (ix._centroids, blind, _core.to_half(np.ascontiguousarray(c @ blind.T).ravel()).reshape(-1, 16))
    try:
        ix._install(ix._layout, ix._vectors, ix._inv_norm, path=None)
        worse = recall_at_k(ix.search(q, 10, nprobe=8)[0], gt, 10)
    finally:
        ix._rank = None
        ix._install(ix._layout, ix._vectors, ix._inv_norm, path=None)
    assert worse < recall_at_k(ix.search(q, 10, nprobe=8)[0], gt, 10) - 0.05


def test_same_results_at_every_simd_level(built, tmp_path):
    """The two stages score with each level's float16 kernels (sums in a different
    order, so the last bits may differ): the rows found are the same."""
    x, q, ix, _ = built
    ix.save(tmp_path / "r.ivf")
    np.save(tmp_path / "q.npy", q)
    code = ("import sys, numpy as np, vecsift\n"
            "ix = vecsift.IVFIndex.open(sys.argv[1] + '/r.ivf')\n"
            "assert ix._list_ranking()[0] is not None\n"
            "ids, _ = ix.search(np.load(sys.argv[1] + '/q.npy'), 10, nprobe=8)\n"
            "np.save(sys.argv[1] + '/' + vecsift.cpu_features()['level'] + '.npy', ids)\n")
    for value in ("scalar", "avx2", "avx512"):
        subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=dict(os.environ, VECSIFT_SIMD=value),
                       check=True)
    found = {p.stem: np.load(p) for p in tmp_path.glob("*.npy") if p.stem != "q"}
    assert "scalar" in found and len(found) >= 2
    ref = found.pop("scalar")
    for ids in found.values():
        assert np.mean([(a == b).all() for a, b in zip(ids, ref)]) >= 0.99
