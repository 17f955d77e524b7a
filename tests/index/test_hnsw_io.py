"""HNSW save / load / mmap round trips and the corrupt-file fuzz test."""
import numpy as np
import pytest

import vecsift
from hnsw_helpers import build, random_data


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    x, q = random_data(n=3000, d=20, nq=40, seed=2)
    labels = np.arange(3000, dtype=np.uint64) * 5 + 1
    index = vecsift.HNSWIndex(20, "ip", m=8, ef_construction=100)
    index.add(x, ids=labels)
    index.mark_deleted(labels[::10].astype(np.int64))
    index.ef_search = 77
    path = tmp_path_factory.mktemp("hnsw") / "index.vsh"
    index.save(path)
    return index, q, path


@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip_identical(saved, mmap):
    index, q, path = saved
    loaded = vecsift.HNSWIndex.load(path, mmap=mmap)
    assert loaded.mapped == mmap
    assert (loaded.dim, loaded.metric, loaded.m, loaded.ef_construction, loaded.ef_search) == (20, "ip", 8, 100, 77)
    assert len(loaded) == len(index) and loaded.label_bound == index.label_bound
    np.testing.assert_array_equal(loaded.labels(), index.labels())
    for kw in (dict(), dict(ef=200), dict(allow=index.labels()[:500].astype(np.int64))):
        a, b = index.search(q, 10, **kw), loaded.search(q, 10, **kw)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_mmap_index_accepts_writes(saved, tmp_path):
    index, q, path = saved
    loaded = vecsift.HNSWIndex.load(path, mmap=True)
    loaded.unmark_deleted([1])
    rng = np.random.default_rng(9)
    extra = rng.standard_normal((100, 20), dtype=np.float32)
    loaded.add(extra)
    assert not loaded.mapped  # copied into memory on the first add
    assert len(loaded) == len(index) + 101
    labels, _ = loaded.search(extra[:5] * 100, 1, ef=100)
    assert list(labels[:, 0]) == list(range(index.label_bound, index.label_bound + 5))
    loaded.save(tmp_path / "again.vsh")
    again = vecsift.HNSWIndex.load(tmp_path / "again.vsh")
    np.testing.assert_array_equal(again.search(q, 10)[0], loaded.search(q, 10)[0])


def test_empty_index_round_trip(tmp_path):
    index = vecsift.HNSWIndex(3, "l2")
    index.save(tmp_path / "e.vsh")
    for mmap in (False, True):
        loaded = vecsift.HNSWIndex.load(tmp_path / "e.vsh", mmap=mmap)
        assert len(loaded) == 0 and loaded.dim == 3
        loaded.add(np.eye(3, dtype=np.float32))
        assert loaded.search(np.eye(3, dtype=np.float32), 1)[0][:, 0].tolist() == [0, 1, 2]


def test_missing_file_is_oserror(tmp_path):
    with pytest.raises(OSError):
        vecsift.HNSWIndex.load(tmp_path / "nope.vsh")


def _expect_corrupt(path, mmap):
    with pytest.raises(vecsift.CorruptIndexError):
        vecsift.HNSWIndex.load(path, mmap=mmap)


def test_fuzz_truncations_and_bit_flips(tmp_path):
    x, _ = random_data(n=300, d=8, nq=1, seed=4)
    index = build(x, "l2", m=4, ef_construction=20)
    index.mark_deleted([3])
    good = tmp_path / "good.vsh"
    index.save(good)
    data = good.read_bytes()
    rng = np.random.default_rng(0)
    bad = tmp_path / "bad.vsh"
    # Truncations: every byte of the header, then offsets across the payload.
    cuts = sorted(set(range(0, 160)) | set(rng.integers(0, len(data), 150).tolist()) | {len(data) - 1})
    for i, cut in enumerate(cuts):
        bad.write_bytes(data[:cut])
        _expect_corrupt(bad, mmap=bool(i % 2))
    # Single bit flips: every header byte and many payload offsets.
    offsets = sorted(set(range(0, 128)) | set(rng.integers(128, len(data), 300).tolist()))
    for i, off in enumerate(offsets):
        flipped = bytearray(data)
        flipped[off] ^= 1 << int(rng.integers(0, 8))
        bad.write_bytes(bytes(flipped))
        _expect_corrupt(bad, mmap=bool(i % 2))
    # Trailing garbage, foreign files, an empty file.
    for blob in (data + b"\0", b"", b"VSFTHNSW", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
                 b"\x93NUMPY" + bytes(500)):
        bad.write_bytes(blob)
        _expect_corrupt(bad, mmap=False)
        _expect_corrupt(bad, mmap=True)
    # The good file still loads and answers.
    assert len(vecsift.HNSWIndex.load(good)) == 299


def test_corrupt_error_is_a_value_error():
    assert issubclass(vecsift.CorruptIndexError, ValueError)
    assert issubclass(vecsift.CorruptIndexError, vecsift.VecsiftError)


def test_unverified_mmap_open_reads_only_the_header_and_small_sections(saved, tmp_path):
    index, q, path = saved
    lazy = vecsift.HNSWIndex.load(path, mmap=True, verify=False)
    assert lazy.file_crc == index.file_crc == vecsift.HNSWIndex.verify_file(path) != 0
    np.testing.assert_array_equal(lazy.search(q, 10)[0], index.search(q, 10)[0])
    # A record flipped on disk: the lazy open does not see it, verify_file does, and searches stay in bounds.
    data = bytearray(path.read_bytes())
    for off in range(200, 200 + 3000 * 64, 97):  # inside the records section: vectors and level-0 links
        data[off] ^= 0xFF
    bad = tmp_path / "bad.vsh"
    bad.write_bytes(bytes(data))
    with pytest.raises(vecsift.CorruptIndexError):
        vecsift.HNSWIndex.load(bad, mmap=True)
    with pytest.raises(vecsift.CorruptIndexError):
        vecsift.HNSWIndex.verify_file(bad)
    lazy_bad = vecsift.HNSWIndex.load(bad, mmap=True, verify=False)
    lazy_bad.search(q, 10)  # wrong answers allowed, out-of-bounds reads not
    with pytest.raises(vecsift.CorruptIndexError):
        lazy_bad.add(q[:1])  # the first add checks the links it would read
