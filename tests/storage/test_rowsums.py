"""Block checksums of float32 rows: kept incrementally, checked on first read, read in full by verify()."""
import os
import shutil
import threading

import numpy as np
import pytest

import vecsift
from vecsift.storage import rowsums
from vecsift.storage.checksum import crc32c
from vecsift.tools.cli import main as cli

OLD = os.path.join(os.path.dirname(__file__), "..", "data", "old_format")
DIM = 96  # 384-byte rows: rows straddle the blocks


def test_incremental_sums_equal_sums_of_the_whole_region():
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    s, pos = rowsums.Sums(), 0
    for n in (1, 65535, 2, 70_000, 0, 131_072, 33_390):
        s.update(data[pos:pos + n])
        pos += n
    assert pos == len(data)
    want = [crc32c(data[i:i + rowsums.BLOCK_BYTES]) for i in range(0, len(data), rowsums.BLOCK_BYTES)]
    assert s.table().tolist() == want
    again = rowsums.sums_from_bytes(s.to_bytes(), len(data), "x")  # round trip, then continue
    again.update(b"tail")
    s.update(b"tail")
    assert again.table().tolist() == s.table().tolist()
    with pytest.raises(vecsift.CorruptIndexError, match="cover"):
        rowsums.sums_from_bytes(s.to_bytes(), 12, "x")


def make(path, n=3000, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    c = vecsift.Collection.create(path, dim=DIM, metric="l2", index="bq")
    c.add([str(i) for i in range(n)], x)
    c.commit()
    return c, x


def flip(path, row, col=3):
    with open(path, "r+b") as f:
        off = 64 + row * DIM * 4 + col * 4
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ 0x10]))


def test_flipped_byte_is_refused_naming_file_and_rows(tmp_path):
    c, x = make(tmp_path / "c")
    c.close()
    flip(tmp_path / "c" / "vectors-0.f32", 1000)
    r = vecsift.open(tmp_path / "c", readonly=True)
    block = 1000 * DIM * 4 // rowsums.BLOCK_BYTES
    first = block * rowsums.BLOCK_BYTES // (DIM * 4)
    with pytest.raises(vecsift.CorruptIndexError, match=rf"vectors-0.f32: rows {first}\.\.\d+ fail"):
        r.search(x[1000], k=5)  # rescoring reads row 1000
    with pytest.raises(vecsift.CorruptIndexError, match="vectors-0.f32"):
        r.get(["1000"], with_vectors=True)
    # rows of intact blocks are still served
    _, v = r.get(["5"], with_vectors=True)
    assert np.array_equal(v[0], x[5])
    with pytest.raises(vecsift.CorruptIndexError, match="fail their block checksum"):
        r.verify()
    assert cli(["verify", str(tmp_path / "c")]) == 1
    r.close()


def test_writer_reopen_continues_the_sums(tmp_path):
    c, x = make(tmp_path / "c", n=500)
    c.close()
    w = vecsift.open(tmp_path / "c")
    y = np.random.default_rng(1).standard_normal((900, DIM)).astype(np.float32)
    w.add([f"y{i}" for i in range(900)], y)
    w.commit()
    w.delete(ids=["3"])
    w.commit()  # a commit of deletes only keeps the sums file
    assert w.verify() == []
    w.close()
    names = [n for n in os.listdir(tmp_path / "c") if n.startswith("sums-")]
    assert names == ["sums-vectors-0-1400.bin"]
    flip(tmp_path / "c" / "vectors-0.f32", 1300)
    r = vecsift.open(tmp_path / "c", readonly=True)
    with pytest.raises(vecsift.CorruptIndexError, match="vectors-0.f32: rows"):
        r.search(y[800], k=3)
    r.close()


def test_compaction_refuses_to_copy_a_corrupt_row(tmp_path):
    c, x = make(tmp_path / "c")
    c.delete(ids=["0"])
    c.commit()
    flip(tmp_path / "c" / "vectors-0.f32", 2000)  # the writer's mapping sees the page cache
    with pytest.raises(vecsift.CorruptIndexError, match="vectors-0.f32"):
        c.compact()
    assert c.manifest.generation == 2  # nothing committed
    c.close()


def test_checks_from_many_threads(tmp_path):
    c, x = make(tmp_path / "c", n=4000)
    snap = c.snapshot()
    checks = snap.vectors.checks
    assert checks is not None and checks.left == len(checks.crcs) > 2
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                rowsums.check_rows(snap.vectors, rng.integers(0, 4000, 30))
        except Exception as exc:  # pragma: no cover - the failure is reported below
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    rowsums.check_all(snap.vectors)
    assert checks.done
    # a new commit inherits the blocks it did not change; slices carry no checks (their rows are renumbered)
    c.add(["new"], x[:1])
    c.commit()
    new = c.snapshot().vectors.checks
    assert new is not checks and new.left == 1  # the tail block, which grew
    rowsums.check_rows(c.snapshot().vectors, [0])  # few left: all are checked at once
    assert new.done
    assert getattr(snap.vectors[10:], "checks", None) is None
    c.close()


def test_collections_written_before_block_sums_open_search_and_say_so(tmp_path):
    for kind in ("bq", "hnsw"):
        shutil.copytree(os.path.join(OLD, kind), tmp_path / kind)
        r = vecsift.open(tmp_path / kind, readonly=True)
        assert getattr(r.snapshot().vectors, "checks", None) is None
        assert len(r.search(np.ones(r.dim, np.float32), k=3, tenant="t1")) == 3
        notes = r.verify()
        assert len(notes) == 1 and "no block checksums" in notes[0]
        r.close()
        assert cli(["verify", str(tmp_path / kind)]) == 0


def test_rows_wider_than_a_block_check_every_block_they_touch(monkeypatch):
    monkeypatch.setattr(rowsums, "FINISH_BYTES", 0)  # no sweep of the last few blocks: see what is touched
    rb, n = 100_000, 12  # each row spans two or three 64 KiB blocks
    data = np.random.default_rng(2).integers(0, 256, rb * n, dtype=np.uint8)
    s = rowsums.Sums()
    s.update(data)
    bad = data.copy()
    bad[5 * rb + 70_000] ^= 1  # row 5, in block (5 * rb + 70_000) // 64 KiB
    for rows, refused in (([4], False), ([6], False), ([5], True), ([-1, 3, 5], True)):
        c = rowsums.Checks("f", bad, rb, s)
        if refused:
            with pytest.raises(vecsift.CorruptIndexError, match="rows 5..5"):
                c.rows(np.array(rows))
        else:
            c.rows(np.array(rows))
            r = rows[0]
            want = set(range(r * rb // rowsums.BLOCK_BYTES, ((r + 1) * rb - 1) // rowsums.BLOCK_BYTES + 1))
            assert set(np.flatnonzero(c.verified)) == want


@pytest.mark.parametrize("block, rows_msg", [(64 << 10, "rows 80..95"), (4 << 10, "rows 90..90")])
def test_the_last_few_blocks_are_swept_once_and_a_bad_one_still_refused(block, rows_msg):
    # any block size a sums file records opens and checks (64 KiB is the default)
    rb, n = 4096, 100  # 7 or 100 blocks, fewer than FINISH_BYTES covers
    data = np.random.default_rng(3).integers(0, 256, rb * n, dtype=np.uint8)
    s = rowsums.Sums(block=block)
    s.update(data)
    data[90 * rb] ^= 1  # the block of row 90
    bad_block = 90 * rb // block
    c = rowsums.Checks("f", data, rb, s)
    c.rows(np.array([0]))  # intact rows are served; the sweep checked the rest but the bad block
    assert c.left == 1 and not c.verified[bad_block]
    with pytest.raises(vecsift.CorruptIndexError, match=rows_msg):
        c.rows(np.array([90]))


def test_core_block_lookup_equals_a_numpy_reference():
    from vecsift import _core

    rng = np.random.default_rng(5)
    for rb, block in ((384, 4096), (1536, 4096), (100_000, 4096), (1536, 65536)):
        n_rows = 500
        n_blocks = -(-n_rows * rb // block)
        verified = (rng.random(n_blocks) < 0.5).astype(np.uint8)
        rows = rng.integers(-3, n_rows, 64)
        r = rows[rows >= 0]
        want = set()
        for x in r.tolist():
            want |= set(range(x * rb // block, min(((x + 1) * rb - 1) // block, n_blocks - 1) + 1))
        want = sorted(b for b in want if not verified[b])
        assert _core.pending_blocks(rows, rb, block, verified).tolist() == want


def test_core_block_checks_refuse_bad_arguments():
    from vecsift import _core

    data = np.zeros(10_000, np.uint8)
    crcs = np.zeros(3, np.uint32)
    with pytest.raises(ValueError, match="verified must be"):
        _core.check_blocks(data, 4096, crcs, np.array([0]), np.zeros(3, bool))
    with pytest.raises(ValueError, match="block out of range"):
        _core.check_blocks(data, 4096, crcs, np.array([3]), np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="data length"):
        _core.check_blocks(data, 1024, crcs, np.array([0]), np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="positive"):
        _core.pending_blocks(np.array([0]), 0, 4096, np.zeros(3, np.uint8))
