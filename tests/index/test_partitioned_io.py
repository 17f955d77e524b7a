"""IVFIndex files: round trip, mapped open, corruption refused, pages shared
across processes, format 1 (sign-bit codes of earlier releases) still read."""
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fixture_arrays import load_array

import vecsift
from vecsift import CorruptIndexError, IVFIndex
from vecsift.index import partitioned_io


def _data(n=6000, nq=40, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((50, dim)).astype(np.float32)
    x = c[rng.integers(0, 50, n)] + 0.8 * rng.standard_normal((n, dim)).astype(np.float32)
    q = c[rng.integers(0, 50, nq)] + 0.8 * rng.standard_normal((nq, dim)).astype(np.float32)
    return np.ascontiguousarray(x, np.float32), np.ascontiguousarray(q, np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    x, q = _data()
    ix = IVFIndex.build(x, nlist=32, nprobe=6, oversample=12)
    path = tmp_path_factory.mktemp("ivf") / "index.ivf"
    ix.save(path)
    return x, q, ix, path


def test_round_trip_is_mapped_and_identical(saved):
    x, q, ix, path = saved
    ox = IVFIndex.open(path)
    assert ox.is_mapped and not ix.is_mapped
    assert (ox.nlist, ox.dim, len(ox), ox.metric, ox.nprobe, ox.oversample) == (32, 64, len(x), "cosine", 6, 12)
    for name in ("codes", "slot_row", "list_block", "list_size", "factors"):
        assert isinstance(getattr(ox._layout, name), np.memmap)
    for name in ("rotation", "centres_rot", "centres"):
        assert isinstance(ox._model[name], np.memmap)
    assert isinstance(ox.centroids, np.memmap) and isinstance(ox._vectors, np.memmap)
    a, b = ix.search(q, 10), ox.search(q, 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    allow = np.random.default_rng(1).random(len(x)) < 0.05
    np.testing.assert_array_equal(ix.search(q, 10, allow=allow)[0], ox.search(q, 10, allow=allow)[0])
    np.testing.assert_array_equal(ix.list_sizes(), ox.list_sizes())


def test_without_vectors_needs_them_at_open(saved, tmp_path):
    x, q, ix, _ = saved
    path = tmp_path / "novec.ivf"
    ix.save(path, include_vectors=False)
    assert os.path.getsize(path) < x.nbytes
    with pytest.raises(ValueError, match="vectors"):
        IVFIndex.open(path)
    with pytest.raises(ValueError, match="vectors"):
        IVFIndex.open(path, vectors=x[:100])
    base = tmp_path / "rows.npy"
    np.save(base, x)
    ox = IVFIndex.open(path, vectors=np.load(base, mmap_mode="r"))
    np.testing.assert_array_equal(ix.search(q, 10)[0], ox.search(q, 10)[0])


def test_add_to_opened_index_and_save_again(saved, tmp_path):
    x, q, ix, path = saved
    ox = IVFIndex.open(path)
    extra, _ = _data(500, 1, seed=9)
    ox.add(extra)
    assert len(ox) == len(x) + 500 and not ox.is_mapped
    ref = IVFIndex(64, 32, nprobe=6, oversample=12).train(x)
    ref._centroids = np.array(ix.centroids)  # same lists as the saved index
    ref.add(np.concatenate([x, extra]))
    np.testing.assert_array_equal(ox.search(q, 10)[0], ref.search(q, 10)[0])
    p2 = tmp_path / "grown.ivf"
    ox.save(p2)
    np.testing.assert_array_equal(IVFIndex.open(p2).search(q, 10)[0], ref.search(q, 10)[0])


def test_trained_but_empty_round_trip(tmp_path):
    x, q = _data(500)
    ix = IVFIndex(64, 8).train(x)
    ix.save(tmp_path / "empty.ivf")
    ox = IVFIndex.open(tmp_path / "empty.ivf")
    assert len(ox) == 0 and ox.nlist == 8
    assert (ox.search(q, 5)[0] == -1).all()
    ox.add(x)
    assert len(ox) == 500


def _corrupt(src, dst, offset, data=None):
    raw = bytearray(open(src, "rb").read())
    if data is None:
        raw[offset] ^= 0xFF
    else:
        raw[offset:offset + len(data)] = data
    open(dst, "wb").write(bytes(raw))


def _sections(path):
    raw = open(path, "rb").read()
    _, _, hlen, _, _ = struct.unpack_from("<8sIIII", raw)
    return json.loads(raw[24:24 + hlen])["sections"]


@pytest.mark.parametrize("section", ["codes", "slot_row", "list_block", "list_size", "centroids", "inv_norm",
                                     "factors", "rotation", "centres_rot", "centres"])
def test_flipped_byte_in_a_section_is_refused(saved, tmp_path, section):
    _, _, _, path = saved
    off, nbytes = _sections(path)[section][:2]
    bad = tmp_path / "bad.ivf"
    _corrupt(path, bad, off + nbytes // 2)
    with pytest.raises(CorruptIndexError, match=section):
        IVFIndex.open(bad)


def test_vectors_checked_with_verify_full(saved, tmp_path):
    _, _, _, path = saved
    off, nbytes = _sections(path)["vectors"][:2]
    bad = tmp_path / "badvec.ivf"
    _corrupt(path, bad, off + 17)
    IVFIndex.open(bad)  # rows are only size-checked by default
    with pytest.raises(CorruptIndexError, match="vectors"):
        IVFIndex.open(bad, verify="full")
    with pytest.raises(ValueError, match="verify"):
        IVFIndex.open(bad, verify="some")


def test_header_damage_truncation_and_foreign_files(saved, tmp_path):
    _, _, _, path = saved
    bad = tmp_path / "bad.ivf"
    _corrupt(path, bad, 30)  # inside the JSON header
    with pytest.raises(CorruptIndexError, match="header"):
        IVFIndex.open(bad)
    _corrupt(path, bad, 0, b"NOTVSIFT")
    with pytest.raises(CorruptIndexError, match="not a vecsift"):
        IVFIndex.open(bad)
    _corrupt(path, bad, 8, struct.pack("<I", 99))
    with pytest.raises(CorruptIndexError, match="version 99"):
        IVFIndex.open(bad)
    raw = open(path, "rb").read()
    for cut in (10, 2000, len(raw) // 2, len(raw) - 1):
        open(bad, "wb").write(raw[:cut])
        with pytest.raises(CorruptIndexError):
            IVFIndex.open(bad)
    open(bad, "wb").write(b"")
    with pytest.raises(CorruptIndexError):
        IVFIndex.open(bad)
    with pytest.raises(FileNotFoundError):
        IVFIndex.open(tmp_path / "missing.ivf")


def test_inconsistent_layout_is_refused(tmp_path):
    x, _ = _data(800)
    ix = IVFIndex.build(x, nlist=8, scorer="sign")
    meta = {"kind": "ivf", "dim": 64, "metric": "cosine", "scorer": "sign", "nlist": 8, "n": 800, "nprobe": 2,
            "oversample": 4, "seed": 0, "has_vectors": True}
    lay = ix._layout
    bad_rows = np.asarray(lay.slot_row).copy()
    bad_rows[3] = 10**9
    partitioned_io.write(tmp_path / "a.ivf", meta, {
        "centroids": ix.centroids, "list_block": lay.list_block, "list_size": lay.list_size, "slot_row": bad_rows,
        "codes": lay.codes, "inv_norm": ix._inv_norm, "vectors": ix._vectors}, version=1)
    with pytest.raises(CorruptIndexError, match="row id"):
        IVFIndex.open(tmp_path / "a.ivf")
    sizes = np.asarray(lay.list_size).copy()
    sizes[0] += 100
    partitioned_io.write(tmp_path / "b.ivf", meta, {
        "centroids": ix.centroids, "list_block": lay.list_block, "list_size": sizes, "slot_row": lay.slot_row,
        "codes": lay.codes, "inv_norm": ix._inv_norm, "vectors": ix._vectors}, version=1)
    with pytest.raises(CorruptIndexError, match="list 0"):
        IVFIndex.open(tmp_path / "b.ivf")
    # A sign-bit layout labelled as format 2 (or RaBitQ codes as format 1) is refused.
    partitioned_io.write(tmp_path / "c.ivf", meta, {
        "centroids": ix.centroids, "list_block": lay.list_block, "list_size": lay.list_size, "slot_row": lay.slot_row,
        "codes": lay.codes, "inv_norm": ix._inv_norm, "vectors": ix._vectors}, version=2)
    with pytest.raises(CorruptIndexError, match="format version 2"):
        IVFIndex.open(tmp_path / "c.ivf")


def _rabitq_sections(ix):
    out = {"centroids": ix.centroids, "rotation": ix._model["rotation"], "centres_rot": ix._model["centres_rot"],
           "centres": ix._model["centres"], **ix._layout.arrays(), "inv_norm": ix._inv_norm, "vectors": ix._vectors}
    return out


def test_inconsistent_rabitq_sections_are_refused(tmp_path):
    x, _ = _data(800)
    ix = IVFIndex.build(x, nlist=8)
    meta = ix._meta(True)
    good = _rabitq_sections(ix)
    cases = {
        "factors": ("factors", np.asarray(ix._layout.factors)[:, :-32]),
        "codes": ("codes", np.asarray(ix._layout.codes)[:-1]),
        "rotation": ("rotation", np.asarray(ix._model["rotation"])[:2]),
        "centres_rot": ("centres_rot", np.zeros((2, ix.code_dim), np.float32)),
        "centres": ("centres", np.zeros((3, 64), np.float32)),
    }
    for match, (name, arr) in cases.items():
        partitioned_io.write(tmp_path / "r.ivf", meta, {**good, name: arr})
        with pytest.raises(CorruptIndexError, match=match):
            IVFIndex.open(tmp_path / "r.ivf")
    partitioned_io.write(tmp_path / "r.ivf", meta, {k: v for k, v in good.items() if k != "factors"})
    with pytest.raises(CorruptIndexError, match="factors"):
        IVFIndex.open(tmp_path / "r.ivf")
    partitioned_io.write(tmp_path / "r.ivf", {**meta, "bits": 3}, good)
    with pytest.raises(CorruptIndexError, match="header"):
        IVFIndex.open(tmp_path / "r.ivf")
    partitioned_io.write(tmp_path / "r.ivf", meta, good, version=1)
    with pytest.raises(CorruptIndexError, match="format version 1"):
        IVFIndex.open(tmp_path / "r.ivf")


OLD = os.path.join(os.path.dirname(__file__), "..", "data", "old_format", "ivf")


def test_format_1_file_of_earlier_releases_opens():
    """sign_v1.ivf was written by the sign-bit IVFIndex before RaBitQ codes
    (format version 1); it opens, searches as it did, and saves as format 1."""
    exp = json.load(open(os.path.join(OLD, "expected.json")))
    q = load_array(os.path.join(OLD, "queries.json"))
    ix = IVFIndex.open(os.path.join(OLD, "sign_v1.ivf"))
    assert (ix.scorer, len(ix), ix.nlist, ix.nprobe, ix.oversample) == ("sign", 600, 8, 3, 8)
    ids, scores = ix.search(q, 5)
    np.testing.assert_array_equal(ids, np.array(exp["ids"]))
    np.testing.assert_allclose(scores, np.array(exp["scores"], np.float32), rtol=1e-6)


def test_versions_written(saved, tmp_path):
    x, q, ix, path = saved
    assert ix.rotation == "fht" and ix._model["rotation"].shape == (4, ix.code_dim)
    assert struct.unpack_from("<I", open(path, "rb").read(), 8)[0] == 3
    sign = IVFIndex.build(x[:2000], nlist=8, scorer="sign")
    sign.save(tmp_path / "s.ivf")
    assert struct.unpack_from("<I", open(tmp_path / "s.ivf", "rb").read(), 8)[0] == 1
    np.testing.assert_array_equal(IVFIndex.open(tmp_path / "s.ivf").search(q, 5)[0], sign.search(q, 5)[0])
    lst = IVFIndex.build(x[:2000], nlist=8, centre="list", bits=1)
    lst.save(tmp_path / "l.ivf")
    assert "centres" not in _sections(tmp_path / "l.ivf")
    ol = IVFIndex.open(tmp_path / "l.ivf")
    assert (ol.centre, ol.bits) == ("list", 1)
    np.testing.assert_array_equal(ol.search(q, 5)[0], lst.search(q, 5)[0])


_READER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import vecsift

    def rollup():
        return {l.split()[0].rstrip(':'): int(l.split()[1]) * 1024
                for l in open('/proc/self/smaps_rollup') if l.strip().endswith('kB')}

    path = sys.argv[1]
    before = rollup()
    ix = vecsift.IVFIndex.open(path)
    q = np.load(sys.argv[2])
    ix.search(q, 10, nprobe=ix.nlist, threads=1)  # touches every code
    after = rollup()
    pss = rss = 0
    inside = False
    for line in open('/proc/self/smaps'):
        f = line.split()
        if f and '-' in f[0] and len(f) >= 5 and ':' in f[3]:
            inside = len(f) >= 6 and f[5] == path
        elif inside and f[0] == 'Pss:':
            pss += int(f[1]) * 1024
        elif inside and f[0] == 'Rss:':
            rss += int(f[1]) * 1024
    print(json.dumps({'anon': after['Anonymous'] - before['Anonymous'], 'pss': pss, 'rss': rss}), flush=True)
    sys.stdin.read()
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux /proc smaps")
def test_processes_share_the_mapped_pages(tmp_path):
    x, q = _data(40_000, 20, dim=128, seed=3)
    ix = IVFIndex.build(x, nlist=64)
    path = str(tmp_path / "shared.ivf")
    ix.save(path)
    codes_bytes = ix.nbytes()["codes"] + ix.nbytes()["slot_row"]
    np.save(tmp_path / "q.npy", q)
    cmd = [sys.executable, "-c", _READER, path, str(tmp_path / "q.npy")]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        stats = [json.loads(p.stdout.readline()) for p in procs]
        # Re-read the first reader's share now that both map the same pages.
        pid = procs[0].pid
        pss = rss = 0
        inside = False
        for line in open(f"/proc/{pid}/smaps"):
            f = line.split()
            if f and "-" in f[0] and len(f) >= 5 and ":" in f[3]:
                inside = len(f) >= 6 and f[5] == path
            elif inside and f[0] == "Pss:":
                pss += int(f[1]) * 1024
            elif inside and f[0] == "Rss:":
                rss += int(f[1]) * 1024
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    for s in stats:
        # Opening and searching copies nothing the size of the codes into private memory.
        assert s["anon"] < codes_bytes / 4, s
        assert s["rss"] >= codes_bytes * 0.9, s
    # With two processes mapping the same pages, each is charged about half.
    assert rss >= codes_bytes * 0.9
    assert pss <= 0.6 * rss


def test_cli_info_and_tune_on_an_ivf_file(tmp_path, capsys):
    from vecsift.tools.cli import main
    x, _ = _data(3000, 1, dim=32, seed=11)
    ix = IVFIndex.build(x, nlist=16, nprobe=1)
    path = tmp_path / "t.ivf"
    ix.save(path, include_vectors=False)
    np.save(tmp_path / "rows.npy", x)
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["scorer"], info["n"], info["nlist"], info["format"], info["rotation"]) == ("rabitq", 3000, 16, 3, "fht")
    assert info["balance"]["lists"] == 16 and info["balance"]["min"] > 0
    assert main(["tune", str(path), "--vectors", str(tmp_path / "rows.npy"), "--target-recall", "0.9",
                 "--sample", "100", "--quiet"]) == 0
    out = capsys.readouterr().out
    chosen = int(out.strip().splitlines()[-1].split("nprobe=")[1].split()[0])
    tuned = IVFIndex.open(path, vectors=x)
    assert tuned.nprobe == chosen > 1
    assert main(["tune", str(path), "--target-recall", "0.9"]) == 2  # rows not given: a clear error


def test_dense_rotation_writes_format_2_that_earlier_releases_read(tmp_path):
    """rotation="dense" is the Haar matrix of earlier releases: saved as format 2,
    and a format-2 header without a rotation field (as those releases wrote it)
    opens with the dense rotation and searches as the index did."""
    x, q = _data(3000)
    dn = IVFIndex.build(x, nlist=16, rotation="dense")
    assert dn._model["rotation"].shape == (dn.code_dim, dn.code_dim)
    dn.save(tmp_path / "d.ivf")
    assert struct.unpack_from("<I", open(tmp_path / "d.ivf", "rb").read(), 8)[0] == 2
    od = IVFIndex.open(tmp_path / "d.ivf")
    assert od.rotation == "dense"
    np.testing.assert_array_equal(od.search(q, 10)[0], dn.search(q, 10)[0])
    old_meta = {k: v for k, v in dn._meta(True).items() if k != "rotation"}
    partitioned_io.write(tmp_path / "old.ivf", old_meta, _rabitq_sections(dn), version=2)
    oo = IVFIndex.open(tmp_path / "old.ivf")
    assert oo.rotation == "dense"
    assert vecsift.index.partitioned.describe(tmp_path / "old.ivf")["rotation"] == "dense"
    a, b = oo.search(q, 10), dn.search(q, 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_rotation_and_version_must_agree(tmp_path):
    x, _ = _data(1500)
    fh = IVFIndex.build(x, nlist=8)
    dn = IVFIndex.build(x, nlist=8, rotation="dense")
    cases = [({**fh._meta(True)}, _rabitq_sections(fh), 2),          # fht signs in a format-2 file
             ({**dn._meta(True)}, _rabitq_sections(dn), 3),          # dense matrix in a format-3 file
             ({**fh._meta(True), "rotation": "dense"}, _rabitq_sections(fh), 3),
             ({k: v for k, v in fh._meta(True).items() if k != "rotation"}, _rabitq_sections(fh), 3)]
    for i, (meta, sections, version) in enumerate(cases):
        partitioned_io.write(tmp_path / f"m{i}.ivf", meta, sections, version=version)
        with pytest.raises(CorruptIndexError):
            IVFIndex.open(tmp_path / f"m{i}.ivf")
    with pytest.raises(ValueError, match="rotation"):
        IVFIndex(64, 8, rotation="hadamard")
    with pytest.raises(ValueError, match="rotation"):
        vecsift._core.ivf_quant_rotation(128, 0, "hadamard")
    with pytest.raises(ValueError, match="rotation"):
        vecsift._core.ivf_quant_rotate(np.ones((3, 128), np.float32), np.ones((2, 128), np.float32))
