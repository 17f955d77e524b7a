"""Regression tests of what the fuzz targets found (docs/fuzzing.md lists them).

Every input saved under tests/data/fuzz/<target>/ is replayed through that target's one_input, in
process: it must pass (the target raises on any outcome other than a clean refusal or a correct
answer). The tests below restate the important ones as plain assertions."""
import glob
import importlib
import json
import os

import numpy as np
import pytest

import harness
import vecsift
from vecsift import CorruptIndexError, LimitError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fuzz")
CASES = sorted(glob.glob(os.path.join(DATA, "*", "*")))


@pytest.mark.parametrize("path", CASES, ids=[os.path.relpath(p, DATA) for p in CASES])
def test_saved_input_replays_clean(path):
    target = importlib.import_module("fuzz_" + os.path.basename(os.path.dirname(path)))
    with open(path, "rb") as f:
        target.one_input(f.read())


def _collection(tmp_path, kind="quant"):
    path = tmp_path / "c"
    path.mkdir(parents=True)
    files = dict(harness.collection_files(kind))  # a copy: the cache serves the fuzz targets too
    for name, data in files.items():
        (path / name).write_bytes(data)
    return path, files


def _rewrite_manifest(path, edit):
    m = harness.manifest_of({"MANIFEST": (path / "MANIFEST").read_bytes()})
    edit(m)
    (path / "MANIFEST").write_bytes(harness.framed_manifest(m))


@pytest.mark.parametrize("name", ["../outside.f32", "/etc/passwd", "", None, 7])
def test_manifest_cannot_name_a_file_outside_the_directory(tmp_path, name):
    path, _ = _collection(tmp_path)
    _rewrite_manifest(path, lambda m: m["vectors"].__setitem__("file", name))
    with pytest.raises(CorruptIndexError, match="vectors entry"):
        vecsift.open(path, readonly=True)


def test_manifest_entries_and_parameters_are_checked(tmp_path):
    path, _ = _collection(tmp_path)
    _rewrite_manifest(path, lambda m: m["dense"].pop("model_crc32c"))
    with pytest.raises(CorruptIndexError, match="model without its checksum"):
        vecsift.open(path, readonly=True)
    path2, _ = _collection(tmp_path / "b", "sign")
    _rewrite_manifest(path2, lambda m: m["index_params"].__setitem__("oversample", None))
    with pytest.raises(CorruptIndexError, match="oversample"):
        vecsift.open(path2, readonly=True)


def test_a_refused_open_closes_its_files(tmp_path):
    path, files = _collection(tmp_path)
    seg = harness.file_of(files, "seg-")
    (path / seg).write_bytes(files[seg][:-8] + b"\0" * 8)  # wrong checksum: refused after vectors opened
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(CorruptIndexError):
            vecsift.open(path)  # writable: the writer lock too
    assert len(os.listdir("/proc/self/fd")) <= before
    (path / seg).write_bytes(files[seg])
    vecsift.open(path).close()  # and the lock was released


def test_segment_without_id_column_is_refused(tmp_path):
    import pyarrow as pa

    path, files = _collection(tmp_path)
    seg = harness.file_of(files, "seg-")
    table = pa.ipc.open_file(pa.BufferReader(files[seg])).read_all().drop_columns(["id"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    harness.recommit(files, seg, sink.getvalue().to_pybytes())
    for name in (seg, "MANIFEST"):
        (path / name).write_bytes(files[name])
    with pytest.raises(CorruptIndexError, match="'id'"):
        vecsift.open(path, readonly=True)


def test_ivf_header_dtype_never_reaches_numpys_parser(tmp_path):
    import fuzz_ivf

    base = fuzz_ivf._base(True)
    hlen = fuzz_ivf._PRE.unpack_from(base)[2]
    head = json.loads(base[24:24 + hlen])
    head["sections"]["centroids"][2] = "f4,(2)i"  # numpy would build a structured dtype (via ast)
    new = json.dumps(head, sort_keys=True).encode()
    data = fuzz_ivf._fix(base[:12] + len(new).to_bytes(4, "little") + base[16:24] + new + base[24 + len(new):], False)
    p = tmp_path / "x.ivf"
    p.write_bytes(data)
    with pytest.raises(CorruptIndexError, match="malformed table entry"):
        vecsift.IVFIndex.open(p)


def test_empty_roaring_bitmap_in_filters_is_corrupt():
    from vecsift.collection.filters import Filters

    f = Filters(["year"])
    f.add_rows(0, __import__("pyarrow").array(["a"]), __import__("pyarrow").array([["g"]]),
               {"year": [2001]})
    raw = bytearray(f.to_bytes())
    hl = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + hl])
    head["entries"][0][4] = 0  # a bitmap of length 0
    new = json.dumps(head).encode()
    with pytest.raises(CorruptIndexError):
        Filters.from_bytes(len(new).to_bytes(8, "little") + new + raw[8 + hl:], "filters")


def test_huge_k_is_a_limit_error_not_an_allocation():
    b = vecsift.BinaryIndex(16)
    b.add(np.ones((4, 16), np.float32))
    with pytest.raises(LimitError, match="queries x k"):
        b.search(np.ones((2, 16), np.float32), k=2**40)
    q = vecsift.QuantizedIndex(16, bits=2)
    q.add(np.ones((4, 16), np.float32))
    with pytest.raises(LimitError):
        q.search(np.ones((0, 16), np.float32), k=2**40)
    bm = vecsift.BM25Index()
    bm.add(["alpha beta"])
    rows, _ = bm.search("alpha", k=2**63 - 1)  # at most n rows come back anyway: no overflow in numba
    assert list(rows) == [0]


def test_quant_candidates_never_outnumber_the_rows():
    # the fuzz finding: 584 queries x k 13185 x oversample 16 over 50 rows gathered 1.7 GB of padding a chunk
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((50, 8)).astype(np.float32)
    q = vecsift.QuantizedIndex(8, bits=2)
    q.add(rows)
    queries = rng.standard_normal((5, 8)).astype(np.float32)
    ids, scores = q.search(queries, k=60, oversample=10_000, rescore=rows)
    assert ids.shape == scores.shape == (5, 60)
    assert (ids[:, 50:] == -1).all() and np.isneginf(scores[:, 50:]).all()
    exact_ids, exact_scores = vecsift.exact_search(rows, queries, 50, "cosine")
    assert (np.sort(ids[:, :50], axis=1) == np.sort(exact_ids, axis=1)).all()  # every row, rescored exactly
    np.testing.assert_allclose(scores[:, :50], exact_scores, rtol=1e-5, atol=1e-6)


def test_where_nested_past_the_stack_is_a_limit_error(tmp_path):
    path, _ = _collection(tmp_path)
    c = vecsift.open(path, readonly=True)
    deep = {"year": 2001}
    for _ in range(5000):
        deep = {"$and": [deep]}
    with pytest.raises(LimitError, match="nesting depth"):
        c.search(np.ones(8, np.float32), k=3, tenant="a", groups=["g1"], where=deep)
    with pytest.raises(LimitError):  # straight to the parser as well (Snapshot.allow)
        c.snapshot().allow("a", ["g1"], deep)
    loop = {"$and": []}
    loop["$and"].append(loop)  # contains itself
    with pytest.raises(LimitError):
        c.search(np.ones(8, np.float32), k=3, tenant="a", groups=["g1"], where=loop)
    with pytest.raises(TypeError, match="is_empty"):
        c.search(np.ones(8, np.float32), k=3, tenant="a", groups=["g1"], where={"must": [{"is_empty": "year"}]})
    c.close()
