"""Block checksums of a float32 row file: one CRC-32C per 64 KiB of row data, checked on first read.

The row file's whole-file checksum (its manifest entry's "crc32c") can only be checked by reading every
row, which a search never does: it reads the few rows it rescores, through the mapping. So the data region
(the bytes after the 64-byte header) is cut into 64 KiB blocks (the sums file records the size), the last one partial, and each has its own
CRC-32C, kept incrementally as rows are appended (`Sums`) and written at each commit that added rows as a
framed blob, ``sums-<rowfile stem>-<rows>.bin`` (kind "rowsums"), which the row file's manifest entry names:
``"blocks": {"file": ..., "crc32c": <checksum of that file>}``.

`Checks` is the reader's side: before rows are used, every block holding a byte of them is checked once
(a per-file bitmap of verified blocks, shared by the snapshots of one commit), so a flipped byte raises
CorruptIndexError naming the file and the rows instead of yielding a different score. Checking costs one
CRC-32C pass over each block the first time any of its rows is read: at most the file once per process.
"""
from __future__ import annotations

import os
import struct
import threading

import numpy as np

from vecsift import _core
from vecsift.errors import CorruptIndexError
from vecsift.storage.checksum import crc32c

# 64 KiB blocks. 4 KiB blocks (one page: a first pass then checks about the pages it reads anyway) were
# measured too and were no cheaper (bench/bench_checked_rows.py, 100k x 384 bq, first pass after open:
# -3.7% QPS with 4 KiB, -2.5% with 64 KiB, page cache warm): the cost was the per-call bookkeeping, which
# now runs in the core. The sums file records its block size, so either opens and checks.
BLOCK_BYTES = 64 << 10
# When this few bytes of blocks are left unverified, they are all checked at once (a few ms warm): rows
# that searches never touch would otherwise keep every later search paying the bitmap lookup.
FINISH_BYTES = 4 << 20
KIND = "rowsums"
_HEAD = struct.Struct("<IQ")  # block bytes, data bytes covered


class Sums:
    """CRC-32C of each block of a growing data region: complete blocks plus the running tail."""

    def __init__(self, table=None, data_bytes: int = 0, block: int | None = None):
        self.block = BLOCK_BYTES if block is None else block
        table = np.zeros(0, np.uint32) if table is None else np.asarray(table, np.uint32)
        tail = data_bytes % self.block
        self._parts = [table[:-1] if tail else table]  # uint32 arrays of complete blocks, in order
        self.tail_crc = int(table[-1]) if tail else 0
        self.tail_len = tail
        self.data_bytes = data_bytes

    def update(self, data) -> None:
        """Continues over `data`, appended at the end of the region."""
        data = memoryview(data).cast("B")
        pos, n = 0, len(data)
        if self.tail_len:  # finish the partial block first
            take = min(self.block - self.tail_len, n)
            self.tail_crc = crc32c(data[:take], self.tail_crc)
            self.tail_len += take
            pos = take
            if self.tail_len == self.block:
                self._parts.append(np.array([self.tail_crc], np.uint32))
                self.tail_crc, self.tail_len = 0, 0
        whole = (n - pos) // self.block * self.block
        if whole:  # every complete block in one core call
            self._parts.append(_core.crc_each_block(data[pos:pos + whole], self.block))
            pos += whole
        if pos < n:
            self.tail_crc = crc32c(data[pos:], 0)
            self.tail_len = n - pos
        self.data_bytes += n

    def table(self) -> np.ndarray:
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        full = self._parts[0]
        if not self.tail_len:
            return full
        return np.concatenate([full, np.array([self.tail_crc], np.uint32)])

    def to_bytes(self) -> bytes:
        return _HEAD.pack(self.block, self.data_bytes) + self.table().tobytes()


def sums_from_bytes(payload, data_bytes: int, name) -> Sums:
    """Parses a rowsums payload and refuses one that does not cover exactly `data_bytes`."""
    if len(payload) < _HEAD.size:
        raise CorruptIndexError(f"{name}: truncated block checksums")
    block, covered = _HEAD.unpack_from(payload)
    if block == 0 or block % 4096 or block > (1 << 30):
        raise CorruptIndexError(f"{name}: bad block size {block}")
    if covered != data_bytes:
        raise CorruptIndexError(f"{name}: block checksums cover {covered} bytes, the manifest commits {data_bytes}")
    n = -(-covered // block)
    if len(payload) - _HEAD.size != 4 * n:
        raise CorruptIndexError(f"{name}: {len(payload) - _HEAD.size} bytes of checksums, expected {4 * n}")
    table = np.frombuffer(payload, np.uint32, count=n, offset=_HEAD.size)
    return Sums(table, covered, block)


class Checks:
    """The blocks of the first `data_bytes` bytes of one mapped row file, each checked once, on demand.

    Thread-safe: any number of searches may call rows() at once; a block is marked verified only after
    its checksum matched, under a lock, and a map read without the lock can only cause a recheck. The
    lookups and checksums run in the core (one call each), so a search's first pass pays microseconds of
    bookkeeping, not a dozen numpy calls.
    """

    def __init__(self, path, data: np.ndarray, row_bytes: int, sums: Sums, inherit: "Checks | None" = None):
        self.path, self.row_bytes, self.block = path, row_bytes, sums.block
        self.data = data  # uint8 view of the data region of the mapping
        self.crcs = np.ascontiguousarray(sums.table(), np.uint32)
        self.verified = np.zeros(len(self.crcs), np.uint8)  # 1 = checked and matched
        if inherit is not None and inherit.block == self.block:
            # complete blocks of an earlier commit hold the same bytes; its partial last block does not
            whole = min(len(inherit.data) // self.block, len(self.crcs))
            self.verified[:whole] = inherit.verified[:whole]
        self.left = int(len(self.verified) - np.count_nonzero(self.verified))
        self._finish = FINISH_BYTES // self.block
        self._swept = False
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self.left == 0

    def rows(self, rows) -> None:
        """Checks every block holding a byte of `rows` (any int array; negative entries are padding)."""
        if self.left == 0:
            return
        need = _core.pending_blocks(np.asarray(rows).ravel(), self.row_bytes, self.block, self.verified)
        if need.size:
            self._check(need)
        if 0 < self.left <= self._finish and not self._swept:
            # once: the few blocks left; a failing one stays unverified, so reading it raises then
            self._swept = True
            self._check(np.flatnonzero(self.verified == 0), strict=False)

    def all(self) -> None:
        """Checks every block not yet checked (a whole-file pass: compaction, exact scans of everything)."""
        if self.left:
            self._check(np.flatnonzero(self.verified == 0))

    def _check(self, blocks, strict: bool = True) -> None:
        with self._lock:
            marked, bad = _core.check_blocks(self.data, self.block, self.crcs, blocks, self.verified, strict)
            self.left -= marked
        if bad >= 0 and strict:
            lo = bad * self.block
            hi = min(lo + self.block, len(self.data))
            raise CorruptIndexError(
                f"{self.path}: rows {lo // self.row_bytes}..{(hi - 1) // self.row_bytes} fail their "
                f"block checksum (block {bad}, bytes {lo}..{hi - 1} after the header)")


class CheckedRows(np.ndarray):
    """A mapped (rows, dim) array that knows its block checks (`.checks`).

    Only the array a snapshot hands out carries them: slices and gathers of it are plain derived arrays
    (class default None), because their row numbers are no longer the file's.
    """

    checks = None


def checked(view: np.ndarray, checks: Checks | None) -> np.ndarray:
    if checks is None:
        return view
    out = view.view(CheckedRows)
    out.checks = checks
    return out


def check_rows(vectors, rows) -> None:
    """Verifies the blocks of `rows` of `vectors` if it carries block checks (else nothing to do)."""
    c = getattr(vectors, "checks", None)
    if c is not None and c.left:
        c.rows(rows)


def check_all(vectors) -> None:
    c = getattr(vectors, "checks", None)
    if c is not None and c.left:
        c.all()


def verify_region(path, fd, offset: int, data_bytes: int, sums: Sums, crc_fn):
    """Streams the data region once: (whole-region checksum with `crc_fn`, list of failing block numbers)."""
    bad, whole, pos, b = [], 0, 0, 0
    piece = max(sums.block, (8 << 20) // sums.block * sums.block)
    table = sums.table()
    buf = memoryview(bytearray(min(piece, data_bytes)))  # one buffer for every piece, read into
    while pos < data_bytes:
        want = min(piece, data_bytes - pos)
        mv = buf[:want]
        if os.preadv(fd, [mv], offset + pos) != want:
            raise CorruptIndexError(f"{path}: file is truncated")
        whole = crc_fn(mv, whole)
        got = _core.crc_each_block(mv, sums.block)
        if want % sums.block:  # the region's short last block
            got = np.append(got, np.uint32(crc32c(mv[want - want % sums.block:])))
        ref = table[b:b + len(got)]
        bad.extend((b + np.flatnonzero(got[:len(ref)] != ref)).tolist())
        b += len(got)
        pos += want
    return whole, bad

