"""IVFIndex over RaBitQ codes (scorer="rabitq", the default): recall against
exact search, estimates equal to a numpy reference of the estimator over the
blocked per-list layout, identical results across SIMD levels, bound-driven
rescoring, filters, adds, both code centres."""
import os
import subprocess
import sys

import numpy as np
import pytest

import vecsift
from vecsift import IVFIndex, _core
from vecsift.eval import recall_at_k

DIM = 96


def clustered(n, nq, dim=DIM, centres=40, spread=0.35, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    q = c[rng.integers(0, centres, nq)] + spread * rng.standard_normal((nq, dim)).astype(np.float32)
    return np.ascontiguousarray(x, np.float32), np.ascontiguousarray(q, np.float32)


def real_like(n, nq, dim=DIM, seed=1):
    """Unit rows around a few hundred anisotropic 'topics' plus a shared offset,
    as sentence embeddings are (a positive mean, clusters of uneven size)."""
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(dim).astype(np.float32)
    topics = mean * 0.8 + rng.standard_normal((300, dim)).astype(np.float32)
    w = rng.dirichlet(np.full(300, 0.5))
    pick = rng.choice(300, n + nq, p=w)
    v = topics[pick] + 0.9 * rng.standard_normal((n + nq, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(v[:n]), np.ascontiguousarray(v[n:])


@pytest.fixture(scope="module")
def data():
    x, q = clustered(12_000, 100, centres=200, spread=1.0)
    return x, q, IVFIndex.build(x, nlist=64)


def test_defaults_are_rabitq_codes(data):
    _, _, ix = data
    assert (ix.scorer, ix.bits, ix.code_dim, ix.centre, ix.rescore) == ("rabitq", 2, 128, "global", "bound")
    assert (ix.oversample, ix.confidence, ix.query_bits) == (4, 1.5, 4)
    assert ix.nbytes()["codes"] == ix._layout.slot_row.size * 2 * 128 // 8


@pytest.mark.parametrize("centre", ["global", "list"])
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_recall_against_exact(data, bits, centre):
    x, q, _ = data
    ix = IVFIndex.build(x, nlist=64, bits=bits, centre=centre)
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    ids, scores, st = ix.search(q, 10, nprobe=16, oversample=4, return_stats=True)
    # What these lists can give: every row of the probed lists rescored.
    ceiling = recall_at_k(ix.search(q, 10, nprobe=16, oversample=len(x), rescore="fixed")[0], gt, 10)
    assert recall_at_k(ids, gt, 10) >= ceiling - {1: 0.06, 2: 0.025, 4: 0.02}[bits]
    assert ceiling >= 0.9
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", qn, xn[ids]), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-7).all()
    assert 10 <= st["rescored"] / len(q) <= 40


def test_real_like_data_recall():
    x, q = real_like(20_000, 200)
    ix = IVFIndex.build(x, nlist=128)
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    ceiling = recall_at_k(ix.search(q, 10, nprobe=24, oversample=len(x), rescore="fixed")[0], gt, 10)
    rec = recall_at_k(ix.search(q, 10, nprobe=24, oversample=8)[0], gt, 10)
    assert ceiling >= 0.9 and rec >= ceiling - 0.02


def test_all_lists_and_all_candidates_is_exact(data):
    x, q, _ = data
    for metric in ("cosine", "ip", "l2"):
        for centre in ("global", "list"):
            m = IVFIndex(DIM, 16, metric, centre=centre).train(x[:3000])
            m.add(x[:3000])
            ids, scores = m.search(q, 10, nprobe=16, oversample=3000, rescore="fixed")
            gi, gs = vecsift.exact_search(x[:3000], q, 10, metric)
            np.testing.assert_array_equal(ids, gi)
            np.testing.assert_allclose(scores, gs, rtol=1e-5, atol=1e-4)


def _reference_estimates(ix, q):
    """Numpy reference of the estimator for every slot of every list, in the
    float32 operations of quant_scan.hpp (QuantEstimator) and quant_codes.hpp
    (the query's quantisation); returns (est (nq, slots), slot_row)."""
    lay, m = ix._layout, ix._model
    D, bits, qb = ix.code_dim, ix.bits, ix.query_bits
    J = D // 8
    nslots = lay.slot_row.size
    if ix._nibbles:  # 4-byte words of 32 rows; byte b of word w: u[8w+2b] low, u[8w+2b+1] high nibble
        words = np.asarray(lay.codes).view(np.uint32).reshape(-1, J, 32).transpose(0, 2, 1)
        by = np.ascontiguousarray(words).reshape(nslots, J).view(np.uint8)
        u = np.stack([by & 15, by >> 4], axis=-1).reshape(nslots, D).astype(np.int64)
    else:
        blocks = np.asarray(lay.codes).reshape(-1, bits * J, 32).transpose(0, 2, 1).reshape(nslots, bits, J)
        u = np.zeros((nslots, D), np.int64)
        for p in range(bits):
            u += np.unpackbits(blocks[:, p, :], axis=1, bitorder="little").astype(np.int64) << p
    a, su, add = (np.asarray(lay.factors)[i] for i in range(3))
    nrm = np.linalg.norm(q, axis=1, keepdims=True)
    qn = np.ascontiguousarray(q / nrm, np.float32) if ix.metric == "cosine" else q
    pad = np.zeros((len(q), D), np.float32)
    pad[:, :ix.dim] = qn
    rq = _core.ivf_quant_rotate(m["rotation"], pad)
    lists = np.repeat(np.arange(ix.nlist), np.diff(np.asarray(lay.list_block)) * 32)
    f32 = np.float32
    top = f32((1 << qb) - 1)
    cB = f32(((1 << bits) - 1) / 2.0)
    out = np.empty((len(q), nslots), np.float32)
    for i in range(len(q)):
        for c in range(m["centres"].shape[0]):
            qr = (rq[i] - m["centres_rot"][c]).astype(np.float32)
            lo, hi = qr.min(), qr.max()
            dq = f32((hi - lo) / top)
            qu = np.clip(np.floor((qr - lo) / dq + f32(0.5)), 0, top).astype(np.int64)
            K = cB * (dq * f32(qu.sum()) + lo * f32(D))
            if ix.metric == "l2":
                mq, cq = f32(2), -f32(np.dot(qr.astype(np.float64), qr.astype(np.float64)))
            else:
                mq, cq = f32(1), f32(np.dot(m["centres"][c].astype(np.float64), qn[i].astype(np.float64)))
            sel = lists == c if m["centres"].shape[0] > 1 else slice(None)
            S = (u[sel] @ qu).astype(np.float32)
            t3 = (dq * S + lo * su[sel]) - K
            out[i, sel] = mq * (a[sel] * t3) + (add[sel] + cq)
    return out, np.asarray(lay.slot_row)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
@pytest.mark.parametrize("centre", ["global", "list"])
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_estimates_equal_numpy_reference(metric, centre, bits):
    """rescore="none" with every list probed returns the top-k estimates of a
    flat reference over the per-list blocked layout (padding slots excluded)."""
    x, q = clustered(3000, 12, dim=64, centres=30, spread=0.8, seed=4)
    ix = IVFIndex.build(x, nlist=12, metric=metric, bits=bits, centre=centre)
    k = 10
    ids, est = ix.search(q, k, nprobe=ix.nlist, rescore="none")
    ref, slot_row = _reference_estimates(ix, q)
    ref[:, slot_row < 0] = -np.inf
    checked = 0
    for i in range(len(q)):
        order = np.lexsort((np.arange(ref.shape[1]), -ref[i]))
        np.testing.assert_allclose(est[i], ref[i][order[:k]], rtol=2e-6, atol=2e-6)
        if ref[i][order[k - 1]] - ref[i][order[k]] > 1e-5:
            np.testing.assert_array_equal(ids[i], slot_row[order[:k]])
            checked += 1
    assert checked >= len(q) // 2


def test_identical_results_across_simd_levels(tmp_path):
    x, q = clustered(6000, 30, dim=80, centres=40, spread=0.9, seed=8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "q.npy", q)
    allow = np.random.default_rng(2).random(len(x)) < 0.2
    np.save(tmp_path / "a.npy", allow)
    code = (
        "import sys, numpy as np, vecsift\n"
        "d = sys.argv[1]\n"
        "x, q, a = np.load(d + '/x.npy'), np.load(d + '/q.npy'), np.load(d + '/a.npy')\n"
        "out = []\n"
        "for centre, bits in (('global', 2), ('list', 2), ('global', 4), ('list', 4)):\n"
        "    ix = vecsift.IVFIndex.build(x, nlist=24, centre=centre, bits=bits)\n"
        "    out.append(ix._layout.codes.tobytes().hex()[:4000] + ix._layout.factors.tobytes().hex()[:4000])\n"
        "    for kw in ({'rescore': 'none'}, {}, {'allow': a}):\n"
        "        ids, s = ix.search(q, 10, nprobe=6, **kw)\n"
        "        out.append(ids.tobytes().hex())\n"
        "        if kw.get('rescore') == 'none':\n"
        "            out.append(s.tobytes().hex())\n"
        "print(vecsift.cpu_features()['level'], '|'.join(out))\n"
    )
    outs = {}
    for value in ("scalar", "avx2", "avx512"):
        env = dict(os.environ, VECSIFT_SIMD=value)
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                           check=True)
        level, body = r.stdout.split(" ", 1)
        outs[level] = body
    assert "scalar" in outs
    assert len(set(outs.values())) == 1, list(outs)


def test_bound_policy_rescores_fewer_rows_at_equal_recall(data):
    x, q, ix = data
    gt, _ = vecsift.exact_search(x, q, 10, "cosine")
    ib, _, sb = ix.search(q, 10, nprobe=16, oversample=4, return_stats=True)
    ifx, _, sf = ix.search(q, 10, nprobe=16, oversample=4, rescore="fixed", return_stats=True)
    assert sf["rescored"] == 40 * len(q)
    assert sb["rescored"] < sf["rescored"]
    assert recall_at_k(ib, gt, 10) >= recall_at_k(ifx, gt, 10) - 0.01
    # Wider bounds rescore more.
    _, _, sn = ix.search(q, 10, nprobe=16, oversample=4, confidence=0.5, return_stats=True)
    assert sn["rescored"] <= sb["rescored"]
    _, _, sw = ix.search(q, 10, nprobe=16, oversample=4, confidence=3.0, return_stats=True)
    assert sw["rescored"] >= sb["rescored"]
    # k rows always, even when k * oversample is small.
    ids, _ = ix.search(q, 10, nprobe=1, oversample=1)
    assert (ids >= 0).all()


@pytest.mark.parametrize("exact_small", [False, True])
@pytest.mark.parametrize("selectivity", [0.01, 0.1])
def test_filters_keep_recall_and_return_k_rows(data, selectivity, exact_small):
    x, q, ix = data
    allow = np.random.default_rng(3).random(len(x)) < selectivity
    gt, _ = vecsift.exact_search(x, q, 10, "cosine", allow=allow)
    ids, _, st = ix.search(q, 10, nprobe=4, allow=allow, exact_small=exact_small, return_stats=True)
    assert (ids >= 0).all()
    assert allow[ids].all()
    unfiltered = recall_at_k(ix.search(q, 10, nprobe=4)[0], vecsift.exact_search(x, q, 10, "cosine")[0], 10)
    assert recall_at_k(ids, gt, 10) >= min(0.99, unfiltered - 0.03)
    if selectivity == 0.01:
        assert recall_at_k(ids, gt, 10) >= 0.99
    if not exact_small:
        assert st["exact"] == 0
        if selectivity == 0.01:
            assert st["lists"] > 4 * len(q)
    elif selectivity == 0.01:
        assert st["exact"] == len(q)


def test_allow_forms_and_fewer_than_k_allowed(data):
    x, q, ix = data
    from pyroaring import BitMap
    few = [5, 77, 900]
    for allow in (few, np.array(few), BitMap(few)):
        for exact_small in (True, False):
            ids, scores = ix.search(q[:3], 10, allow=allow, exact_small=exact_small)
            assert sorted(ids[0, :3].tolist()) == few
            assert (ids[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    ids, _ = ix.search(q[:2], 5, allow=np.zeros(len(x), bool))
    assert (ids == -1).all()


@pytest.mark.parametrize("centre", ["global", "list"])
def test_incremental_add_equals_one_add(data, centre):
    x, q, _ = data
    a = IVFIndex(DIM, 32, centre=centre).train(x)
    b = IVFIndex(DIM, 32, centre=centre).train(x)
    a.add(x)
    for s in range(0, len(x), 5000):
        b.add(x[s:s + 5000])
    assert len(a) == len(b) == len(x)
    np.testing.assert_array_equal(a.list_sizes(), b.list_sizes())
    np.testing.assert_array_equal(a._layout.codes, b._layout.codes)
    ia, sa = a.search(q, 10, nprobe=8)
    ib, sb = b.search(q, 10, nprobe=8)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(sa, sb)
    for r in range(5):
        ids, _ = a.search(x[r], 1, nprobe=1, oversample=10_000, rescore="fixed")
        assert ids[0, 0] == r


def test_retrain_reassigns_and_reencodes(data):
    x, q, _ = data
    ix = IVFIndex(DIM, 16, centre="list").train(x[:2000])
    ix.add(x[:6000])
    ix.train(x, nlist=48)
    assert ix.nlist == 48 and len(ix) == 6000 and ix.list_sizes().sum() == 6000
    assert ix._model["centres"].shape == (48, DIM)
    gt, _ = vecsift.exact_search(x[:6000], q, 10, "cosine")
    assert recall_at_k(ix.search(q, 10, nprobe=12)[0], gt, 10) >= 0.9


def test_threads_give_identical_results(data):
    x, q, ix = data
    a = ix.search(q, 10, threads=1)
    b = ix.search(q, 10, threads=2)
    np.testing.assert_array_equal(a[0], b[0])
    c = np.stack([ix.search(qi, 10, threads=1)[0][0] for qi in q[:10]])
    np.testing.assert_array_equal(a[0][:10], c)


def test_fast_query_tables_equal_the_quant_kernels():
    rng = np.random.default_rng(0)
    for qb in (4, 5, 6, 8):
        for D in (64, 448):
            assert _core.ivf_luts_match(rng.integers(0, 1 << qb, D).astype(np.uint8), qb)


def test_bad_input(data):
    x, q, ix = data
    with pytest.raises(ValueError, match="bits"):
        IVFIndex(DIM, 8, bits=3)
    with pytest.raises(ValueError, match="query_bits"):
        IVFIndex(DIM, 8, query_bits=2)
    with pytest.raises(ValueError, match="code_dim"):
        IVFIndex(DIM, 8, code_dim=100)
    with pytest.raises(ValueError, match="centre"):
        IVFIndex(DIM, 8, centre="median")
    with pytest.raises(ValueError, match="rescore"):
        IVFIndex(DIM, 8, rescore="maybe")
    with pytest.raises(ValueError, match="rescore"):
        ix.search(q, 10, rescore="all")
    with pytest.raises(ValueError, match="confidence"):
        ix.search(q, 10, confidence=-1)
    with pytest.raises(ValueError, match="confidence"):
        ix.search(q, 10, confidence=float("nan"))
    with pytest.raises(ValueError, match="query_bits"):
        ix.search(q, 10, query_bits=9)
    with pytest.raises(ValueError, match="oversample"):
        ix.search(q, 10, oversample=0)
    with pytest.raises(ValueError, match="allow"):
        ix.search(q, 10, allow=np.ones(5, bool))
    with pytest.raises(ValueError, match="queries"):
        ix.search(np.ones((2, DIM + 1), np.float32), 10)


def test_l2_lists_ranked_at_any_scale():
    """Lists are ranked on float16 centroids only for cosine / ip (unit centroids): l2 centroids
    at a scale past float16's range (65504) must rank exactly as at scale 1 (2^20 is exact)."""
    x, q = clustered(3000, 20, dim=32, centres=12, spread=0.6, seed=9)
    small = IVFIndex.build(x, nlist=16, metric="l2", nprobe=3, oversample=8)
    big = IVFIndex.build(x * np.float32(2 ** 20), nlist=16, metric="l2", nprobe=3, oversample=8)
    a, b = small.search(q, 10), big.search(q * np.float32(2 ** 20), 10)
    np.testing.assert_array_equal(a[0], b[0])


def test_non_finite_centroids_are_refused(tmp_path):
    from vecsift import CorruptIndexError
    from vecsift.index import partitioned_io
    x, _ = clustered(800, 2, dim=32, centres=4, spread=0.5, seed=2)
    ix = IVFIndex.build(x, nlist=4)
    path = tmp_path / "n.ivf"
    ix.save(path)
    meta, arr = partitioned_io.read(path)
    meta.pop("_version")
    sections = {k: np.array(v) for k, v in arr.items()}
    sections["centroids"][1, 3] = np.nan
    partitioned_io.write(path, meta, sections)
    with pytest.raises(CorruptIndexError, match="centroids"):
        IVFIndex.open(path)


def _as_plane_file(ix, path, tmp_path):
    """A copy of ix's file as format 3 writes it (4-bit codes as blocked bit planes), for the
    4-bit files of earlier releases."""
    from vecsift.index import partitioned_io
    from vecsift.index.partitioned import _Layout
    ix.save(path)
    meta, arr = partitioned_io.read(path)
    meta.pop("_version")
    assign, codes, fac = ix._layout.row_major(len(ix), 32, np.uint32)
    planes = _core.quant_nibble_rows(codes.view(np.uint8), to_nibbles=False)
    lay = _Layout.build(assign, planes, ix.nlist, 32, fac)
    sections = {k: np.array(v) for k, v in arr.items()}
    sections.update(lay.arrays())
    old = tmp_path / "planes.ivf"
    partitioned_io.write(old, meta, sections, version=3)
    return old


def test_four_bit_files_in_either_layout_give_the_same_answers(tmp_path):
    from vecsift.index.partitioned import describe
    x, q = real_like(4000, 20, seed=7)
    ix = IVFIndex.build(x, nlist=16, bits=4)
    assert ix._nibbles
    path = tmp_path / "n.ivf"
    old = _as_plane_file(ix, path, tmp_path)
    new, legacy = IVFIndex.open(path), IVFIndex.open(old)
    assert new._nibbles and not legacy._nibbles
    assert describe(path)["code_layout"] == "nibbles" and describe(old)["code_layout"] == "planes"
    assert describe(path)["format"] == 4 and describe(old)["format"] == 3
    for kw in ({"rescore": "none"}, {}, {"nprobe": 16, "rescore": "none"}):
        a, b, c = ix.search(q, 10, **kw), new.search(q, 10, **kw), legacy.search(q, 10, **kw)
        for got in (b, c):
            np.testing.assert_array_equal(got[0], a[0])
            np.testing.assert_array_equal(got[1], a[1])
    # one query at a time takes the per-query path; a batch the list-major one
    for i in range(3):
        for idx in (new, legacy):
            np.testing.assert_array_equal(idx.search(q[i], 10, rescore="none")[0][0], a[0][i])
    # adds keep each file's layout and the same answers
    more = real_like(500, 1, seed=8)[0]
    for idx in (new, legacy, ix):
        idx.add(more)
    a, b, c = ix.search(q, 10, rescore="none"), new.search(q, 10, rescore="none"), legacy.search(q, 10, rescore="none")
    assert new._nibbles and not legacy._nibbles
    np.testing.assert_array_equal(b[0], a[0])
    np.testing.assert_array_equal(c[0], a[0])
    np.testing.assert_array_equal(c[1], a[1])


def test_adds_in_the_nibble_layout_equal_one_add():
    x, q = real_like(3000, 10, seed=9)
    one = IVFIndex(DIM, 12, bits=4).train(x)
    one.add(x)
    two = IVFIndex(DIM, 12, bits=4).train(x)
    two.add(x[:1234])
    two.add(x[1234:])
    for kw in ({"rescore": "none"}, {}):
        a, b = one.search(q, 10, **kw), two.search(q, 10, **kw)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_format_four_holds_only_four_bit_codes(tmp_path):
    from vecsift import CorruptIndexError
    from vecsift.index import partitioned_io
    x, _ = clustered(800, 2, dim=32, centres=4, spread=0.5, seed=2)
    ix = IVFIndex.build(x, nlist=4, bits=2)
    path = tmp_path / "b.ivf"
    ix.save(path)
    meta, arr = partitioned_io.read(path)
    meta.pop("_version")
    partitioned_io.write(path, meta, {k: np.array(v) for k, v in arr.items()}, version=4)
    with pytest.raises(CorruptIndexError, match="4-bit"):
        IVFIndex.open(path)
