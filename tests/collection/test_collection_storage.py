"""On-disk guarantees: writer lock, corrupt/foreign/truncated files, uncommitted bytes cut."""
import os

import numpy as np
import pytest

import vecsift
from vecsift import CorruptIndexError, VecsiftError

from collection_util import clustered


def build(path, n=300, dim=16):
    x = clustered(n, dim, seed=7)
    c = vecsift.Collection.create(path, dim, filter_fields=["kind"])
    c.add([f"r{i}" for i in range(n)], x, texts=[f"t{i}" for i in range(n)], metadata={"kind": np.arange(n) % 3})
    c.commit()
    c.close()
    return x


def files(path, prefix):
    return [path / f for f in sorted(os.listdir(path)) if f.startswith(prefix)]


def test_second_writer_refused_readers_allowed(tmp_path):
    x = build(tmp_path / "c")
    w = vecsift.open(tmp_path / "c")
    with pytest.raises(VecsiftError, match="another writer"):
        vecsift.open(tmp_path / "c")
    r1 = vecsift.open(tmp_path / "c", readonly=True)
    r2 = vecsift.open(tmp_path / "c", readonly=True)
    assert r1.search(x[3], k=1)[0].id == r2.search(x[3], k=1)[0].id == "r3"
    with pytest.raises(VecsiftError, match="readonly"):
        r1.add(["z"], x[:1])
    w.close()
    vecsift.open(tmp_path / "c").close()  # the lock is free again
    r1.close()
    r2.close()


@pytest.mark.parametrize("prefix", ["MANIFEST", "filters-", "seg-", "codes-"])
def test_flipped_byte_is_refused_naming_the_file(tmp_path, prefix):
    build(tmp_path / "c")
    target = files(tmp_path / "c", prefix)[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x40
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match=target.name):
        vecsift.open(tmp_path / "c")
    with pytest.raises(CorruptIndexError, match=target.name):
        vecsift.open(tmp_path / "c", readonly=True)


def test_vector_file_checks(tmp_path):
    build(tmp_path / "c")
    vec = files(tmp_path / "c", "vectors-")[0]
    good = vec.read_bytes()
    vec.write_bytes(b"PK\x03\x04 not ours" + good[16:])  # foreign header
    with pytest.raises(CorruptIndexError, match=vec.name):
        vecsift.open(tmp_path / "c")
    vec.write_bytes(good[: len(good) - 100])  # fewer rows than committed
    with pytest.raises(CorruptIndexError, match="manifest commits 300"):
        vecsift.open(tmp_path / "c")
    bad = bytearray(good)
    bad[-7] ^= 1
    vec.write_bytes(bytes(bad))
    c = vecsift.open(tmp_path / "c")  # opening does not read every row ...
    with pytest.raises(CorruptIndexError, match=vec.name):
        c.verify()  # ... verify() does
    c.close()


def test_missing_file_and_empty_manifest(tmp_path):
    build(tmp_path / "c")
    seg = files(tmp_path / "c", "seg-")[0]
    seg.unlink()
    with pytest.raises(CorruptIndexError, match=seg.name):
        vecsift.open(tmp_path / "c")
    (tmp_path / "c" / "MANIFEST").write_bytes(b"")
    with pytest.raises(CorruptIndexError, match="MANIFEST"):
        vecsift.open(tmp_path / "c")
    with pytest.raises(FileNotFoundError):
        vecsift.open(tmp_path / "nothing")


def test_uncommitted_bytes_are_ignored_then_truncated(tmp_path):
    x = build(tmp_path / "c")
    vec = files(tmp_path / "c", "vectors-")[0]
    size = vec.stat().st_size
    with open(vec, "ab") as f:
        f.write(np.ones((5, 16), np.float32).tobytes())  # what a crashed add leaves
    (tmp_path / "c" / "seg-999.arrow").write_bytes(b"junk of a crashed commit")
    r = vecsift.open(tmp_path / "c", readonly=True)
    assert len(r) == 300 and vec.stat().st_size > size  # readers never write
    r.close()
    c = vecsift.open(tmp_path / "c")
    assert len(c) == 300 and vec.stat().st_size == size
    assert not (tmp_path / "c" / "seg-999.arrow").exists()
    c.add(["new"], x[:1] * -1)
    c.commit()
    assert c.search(-x[0], k=1)[0].id == "new"
    c.close()
    with vecsift.open(tmp_path / "c") as c:
        assert len(c) == 301
        c.verify()


def test_old_generation_files_are_removed(tmp_path):
    x = build(tmp_path / "c")
    c = vecsift.open(tmp_path / "c")
    for j in range(5):
        c.add([f"x{j}"], x[j:j + 1])
        c.commit()
    c.close()
    assert len(files(tmp_path / "c", "filters-")) == 1
    assert len(files(tmp_path / "c", "seg-")) == 6  # one per commit that added chunks, until compact


def test_reader_refresh_follows_the_writer(tmp_path):
    x = build(tmp_path / "c")
    w = vecsift.open(tmp_path / "c")
    r = vecsift.open(tmp_path / "c", readonly=True)
    w.add(["new"], -x[:1])
    w.delete(ids=["r1"])
    assert r.refresh() is False and len(r) == 300
    w.commit()
    assert r.refresh() is True
    assert len(r) == 300 and r.search(-x[0], k=1)[0].id == "new" and "r1" not in r.ids()
    w.compact()  # renumbers rows and replaces every file under the reader
    assert r.refresh() is True and len(r) == 300 and r.search(x[2], k=1)[0].id == "r2"
    w.close()
    r.close()


def test_compact_after_a_failed_compact(tmp_path, monkeypatch):
    x = build(tmp_path / "c")
    c = vecsift.open(tmp_path / "c")
    c.delete(ids=["r0"])

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(vecsift.collection.commit, "write_segment", boom)
    with pytest.raises(OSError, match="disk full"):
        c.compact()
    monkeypatch.undo()
    assert len(c) == 299 and c.search(x[1], k=1)[0].id == "r1"  # the old generation is intact
    c.compact()
    assert len(c) == 299 and c.search(x[1], k=1)[0].id == "r1"
    c.close()
    with vecsift.open(tmp_path / "c") as c:
        assert len(c) == 299 and "r0" not in c.ids()
